"""tutti: collective communication for synchronous data-parallel training.

This package is pure Python over libtutti's C API (tutti.h), loaded with
ctypes. Framework bindings live in subpackages: ``import tutti.torch as hvd``.
"""

from tutti.basics import (
    built_with,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    library_version,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
    tcp_built,
)
from tutti.compression import Compression, Compressor
from tutti.errors import (
    DuplicateNameError,
    HorovodInternalError,
    HostsUpdatedInterrupt,
    InternalError,
    InvalidArgumentError,
    MismatchError,
    NotInitializedError,
    PeerLostError,
    ShutdownError,
    StalledError,
    TuttiError,
    TuttiIOError,
    WaitTimeoutError,
)

# (tutti.process_sets is the module; its process_sets() lists the registered sets.)
from tutti.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    process_set_by_id,
    remove_process_set,
)

__version__ = "0.1.0"

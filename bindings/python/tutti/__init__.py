"""tutti: collective communication for synchronous data-parallel training.

This package is pure Python over libtutti's C API (tutti.h), loaded with
ctypes. Framework bindings live in subpackages: ``import tutti.torch as hvd``.
"""

from tutti.basics import (
    built_with,
    cross_rank,
    cross_size,
    cuda_built,
    init,
    is_initialized,
    library_version,
    local_rank,
    local_size,
    mpi_built,
    nccl_built,
    rank,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
    tcp_built,
)
from tutti.compression import Compression, Compressor
from tutti.errors import (
    DuplicateNameError,
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

__version__ = "0.1.0"

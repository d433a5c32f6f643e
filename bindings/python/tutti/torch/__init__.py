"""tutti for PyTorch: ``import tutti.torch as hvd`` ports a Horovod script.

CPU tensors of every dtype (uint8, int8, int16, int32, int64, float16,
bfloat16, float32, float64, bool), any shape; CUDA tensors too in a build
with CUDA (cuda_built()). See tutti.torch.ops for the collectives,
tutti.torch.functions for the helpers, tutti.torch.optimizer.DistributedOptimizer,
tutti.torch.sync_batch_norm.SyncBatchNorm, and tutti.torch.p2p for
point-to-point messages (send, recv and their async forms).
"""

from tutti.basics import (
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    is_homogeneous,
    is_initialized,
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
)
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
from tutti.basics import init as _init_job
from tutti.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from tutti.torch import _torchrun
from tutti.torch.compression import Compression
from tutti.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from tutti.torch.ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    bytes_sent,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from tutti.torch.grouped import (
    grouped_allgather,
    grouped_allgather_async,
    grouped_reducescatter,
    grouped_reducescatter_async,
)
from tutti.torch.optimizer import DistributedOptimizer
from tutti.torch.p2p import recv, recv_async, send, send_async
from tutti.torch.sparse import SparseHandle, sparse_allreduce, sparse_allreduce_async
from tutti.torch.sync_batch_norm import SyncBatchNorm



def init(comm=None, process_sets=None):
    """tutti.init() (see tutti.basics.init). Under torchrun without tuttirun's
    variables, the ranks first meet through torchrun's store
    (tutti.torch._torchrun): hvd.init() works under either launcher."""
    if comm is None and process_sets in (None, []):
        _torchrun.set_env_from_torchrun()
    _init_job(comm, process_sets)


# hvd.elastic: TorchState, ElasticSampler, run (imports the modules above).
from tutti.torch import elastic  # noqa: E402

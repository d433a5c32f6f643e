"""tutti for PyTorch: ``import tutti.torch as hvd`` ports a Horovod script.

CPU tensors of every dtype (uint8, int8, int16, int32, int64, float16,
bfloat16, float32, float64, bool; uint16, uint32, uint64 on torch >= 2.3),
any shape; CUDA tensors too in a build with CUDA (cuda_built()). See
tutti.torch.ops for the collectives, tutti.torch.functions for the helpers,
tutti.torch.optimizer.DistributedOptimizer,
tutti.torch.sync_batch_norm.SyncBatchNorm, and tutti.torch.p2p for
point-to-point messages (send, recv and their async forms).
"""

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

# hvd.elastic: TorchState, ElasticSampler, run.
from tutti.torch import elastic  # noqa: F401
from tutti.torch._init import init  # noqa: F401
from tutti.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)

# The collectives, queries, reduce ops, process sets and Compression: the
# names Horovod's horovod.torch takes from its mpi_ops (tutti.torch.mpi_ops.__all__).
from tutti.torch.mpi_ops import *  # noqa: F401,F403
from tutti.torch.ops import bytes_sent
from tutti.torch.optimizer import DistributedOptimizer
from tutti.torch.p2p import recv, recv_async, send, send_async
from tutti.torch.sparse import SparseHandle, sparse_allreduce
from tutti.torch.sync_batch_norm import SyncBatchNorm


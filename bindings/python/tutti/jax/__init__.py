"""tutti for JAX: ``import tutti.jax as hvd``.

Collectives on jax arrays as XLA FFI custom calls (libtutti_jax.so, built
against the installed jaxlib), usable eagerly and inside jax.jit, with
gradients; pytree helpers, an optax wrapper that averages gradients, and the
lifecycle, placement, process sets and errors of the tutti package. See
docs/jax.md. Importing registers the custom-call targets (ImportError saying
how to build the library when it is missing).
"""

from tutti.basics import (
    cross_rank,
    cross_size,
    init,
    is_initialized,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from tutti.compression import Compression
from tutti.errors import (
    InvalidArgumentError,
    MismatchError,
    PeerLostError,
    ShutdownError,
    TuttiError,
)
from tutti.jax import _loader
from tutti.jax._primitive import translated
from tutti.jax.functions import (
    allgather_object,
    allreduce_tree,
    broadcast_object,
    broadcast_parameters,
)
from tutti.jax.ops import (
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    grouped_allreduce,
    reducescatter,
)
from tutti.jax.optimizer import DistributedOptimizer
from tutti.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)

__all__ = [
    "Average",
    "Compression",
    "DistributedOptimizer",
    "InvalidArgumentError",
    "Max",
    "Min",
    "MismatchError",
    "PeerLostError",
    "ProcessSet",
    "Product",
    "ShutdownError",
    "Sum",
    "TuttiError",
    "add_process_set",
    "allgather",
    "allgather_object",
    "allreduce",
    "allreduce_tree",
    "alltoall",
    "barrier",
    "broadcast",
    "broadcast_object",
    "broadcast_parameters",
    "cross_rank",
    "cross_size",
    "global_process_set",
    "grouped_allreduce",
    "init",
    "is_initialized",
    "local_rank",
    "local_size",
    "rank",
    "reducescatter",
    "remove_process_set",
    "shutdown",
    "size",
    "start_timeline",
    "stop_timeline",
    "translated",
]

_loader.load()

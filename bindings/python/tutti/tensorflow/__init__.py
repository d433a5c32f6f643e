"""tutti for TensorFlow 2: ``import tutti.tensorflow as hvd`` ports a Horovod
script (horovod.tensorflow, 0.28.1).

The collectives are TensorFlow custom ops (libtutti_tensorflow.so, built
against the installed TensorFlow: see tutti.tensorflow._loader), asynchronous
kernels that tutti's background thread completes, usable eagerly and inside
tf.function, with gradients (tutti.tensorflow.mpi_ops). Host (CPU) tensors
of uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16,
bfloat16, float32, float64, bool. docs/tensorflow.md lists the API against
Horovod's and what is missing.
"""

import tensorflow as tf

from tutti.basics import (
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
    HorovodInternalError,
    HostsUpdatedInterrupt,
    InvalidArgumentError,
    MismatchError,
    NotInitializedError,
    PeerLostError,
    ShutdownError,
    StalledError,
    TuttiError,
)
from tutti.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)

# hvd.elastic: TensorFlowKerasState, TensorFlowState, run.
from tutti.tensorflow import elastic  # noqa: F401
from tutti.tensorflow import gradient_tape as _gradient_tape

# The Keras optimizer that DistributedOptimizer returns (Keras 3 comes with
# TensorFlow 2.16 and later).
from tutti.tensorflow import keras as _keras
from tutti.tensorflow import legacy_optimizer as _legacy
from tutti.tensorflow.collectives import (
    allreduce,
    grouped_allreduce,
    grouped_reducescatter,
    reducescatter,
)
from tutti.tensorflow.compression import Compression
from tutti.tensorflow.functions import (
    BroadcastGlobalVariablesHook,
    allgather_object,
    broadcast_,
    broadcast_global_variables,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from tutti.tensorflow.gradient_tape import (
    DistributedGradientTape,
    PartialDistributedGradientTape,
)
from tutti.tensorflow.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    alltoall,
    barrier,
    broadcast,
    grouped_allgather,
    join,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    size_op,
)
from tutti.tensorflow.sync_batch_norm import SyncBatchNormalization


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's hvd.DistributedOptimizer. A tf.compat.v1.train.Optimizer
    becomes one whose compute_gradients() averages the gradients
    (tutti.tensorflow.legacy_optimizer; TF1 graphs); a Keras 3 optimizer the
    Keras one (tutti.tensorflow.keras.DistributedOptimizer). ValueError for a
    predivide factor with op != Average, average_aggregated_gradients with
    Adasum, op=Adasum with Keras; NotImplementedError for op=Adasum with a
    TF1 optimizer (Horovod's delta optimizer is not in tutti)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    groups = _gradient_tape.check_groups(num_groups, groups)
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if op == Adasum:
            raise NotImplementedError(
                "op=Adasum with a tf.compat.v1.train.Optimizer (Horovod's "
                "_DistributedAdasumOptimizer) is not supported: use op=Average or Sum")
        return _legacy.DistributedOptimizerV1(
            optimizer, name, use_locking,
            dict(device_dense=device_dense, device_sparse=device_sparse, compression=compression,
                 sparse_as_dense=sparse_as_dense, op=op,
                 gradient_predivide_factor=gradient_predivide_factor, groups=groups),
            backward_passes_per_step, average_aggregated_gradients, process_set,
            scale_local_gradients)
    if op == Adasum:
        raise ValueError("op == Adasum is not supported yet with Keras")
    return _keras.DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)

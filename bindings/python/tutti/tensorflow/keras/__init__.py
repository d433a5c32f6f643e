"""tutti for Keras 3 on the TensorFlow backend: ``import tutti.tensorflow.keras
as hvd`` (Horovod's horovod.tensorflow.keras path; tutti.keras is the same
module).

DistributedOptimizer wraps a Keras 3 optimizer so that model.fit (compiled
with it) and optimizer.apply/apply_gradients average the gradients over the
ranks first (backward_passes_per_step > 1: summed locally first, reduced
once every that many steps); PartialDistributedOptimizer leaves some layers'
gradients local. The callbacks are in tutti.tensorflow.keras.callbacks,
elastic training in tutti.tensorflow.keras.elastic. Differences from
Horovod: Keras 3 optimizers only (keras.optimizers.*; the Keras 2 legacy
ones are gone from Keras 3); the ops have no XLA kernels, so a model must
not be compiled with jit_compile=True (Keras's "auto" is off on CPU-only
machines).
"""

import keras
import tensorflow as tf

from tutti.basics import (  # noqa: F401 (Horovod's hvd.keras re-exports these)
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
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
from tutti.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from tutti.tensorflow import collectives as _collectives
from tutti.tensorflow import functions as _functions
from tutti.tensorflow import mpi_ops as _mpi_ops
from tutti.tensorflow.compression import Compression
from tutti.tensorflow.functions import allgather_object, broadcast_object  # noqa: F401
from tutti.tensorflow.gradient_aggregation import LocalGradientAggregator
from tutti.tensorflow.gradient_tape import (
    _key,
    allreduce_grads_fn,
    check_groups,
    reduce_with_locals,
)
from tutti.tensorflow.keras import callbacks, elastic  # noqa: F401
from tutti.tensorflow.mpi_ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401


def _aggregated_apply(self, base, reduce, grads, variables, trainable_variables):
    """apply() with local aggregation (self._tutti_bpps > 1 passes per reduction)."""
    if not self.built:
        self.build(variables)  # not inside the tf.cond below: it makes variables
    agg = self.__dict__.get("_tutti_aggregator")
    if agg is None:
        agg = LocalGradientAggregator(self._tutti_bpps, reduce, self._tutti_sparse_as_dense,
                                      self._tutti_average_aggregated)
        self._tutti_aggregator = agg
    grads = agg.compute_gradients(list(grads), variables)

    def apply_step():
        base.apply(self, grads, trainable_variables)

    def count_step():
        self.iterations.assign_add(1)

    agg.apply_gradients(apply_step, count_step, grads)


def _distributed_class(base, allreduce_name, device_dense, device_sparse, compression,
                       sparse_as_dense, gradient_predivide_factor, op, groups, process_set,
                       scale_local_gradients):
    """A subclass of the optimizer class `base` whose apply() reduces first
    (with local aggregation when the instance's _tutti_bpps > 1). Same name
    and module as `base`, so that a saved model loads without tutti."""

    def apply(self, grads, trainable_variables=None):
        variables = (list(trainable_variables) if trainable_variables is not None
                     else list(self._trainable_variables))

        def reduce(grads, variables):
            fn = allreduce_grads_fn(allreduce_name, device_dense, device_sparse, compression,
                                    sparse_as_dense, op, gradient_predivide_factor, groups,
                                    process_set)
            return reduce_with_locals(fn, list(grads), variables,
                                      getattr(self, "_tutti_local_vars", ()), process_set,
                                      scale_local_gradients)

        if getattr(self, "_tutti_bpps", 1) > 1:
            return _aggregated_apply(self, base, reduce, grads, variables, trainable_variables)
        return base.apply(self, reduce(grads, variables), trainable_variables)

    def register_local_var(self, var):
        """Marks `var` as local to this rank: its gradient is not reduced."""
        if not hasattr(self, "_tutti_local_vars"):
            self._tutti_local_vars = set()
        self._tutti_local_vars.add(_key(var))

    return type(base.__name__, (base,), {
        "apply": apply, "register_local_var": register_local_var,
        "__module__": base.__module__, "_tutti_distributed": True,
        "__doc__": "%s whose apply() averages the gradients over tutti's ranks first."
                   % base.__name__})


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A new optimizer of `optimizer`'s class and config (Horovod's
    hvd.DistributedOptimizer for Keras) whose apply() first averages the
    gradients over the process set (op, compression, sparse_as_dense,
    gradient_predivide_factor, groups: as DistributedGradientTape).
    backward_passes_per_step > 1: gradients are summed locally and reduced and
    applied once every that many apply() calls (divided by the number when
    average_aggregated_gradients; tutti.tensorflow.gradient_aggregation).
    TypeError for anything but a Keras 3 optimizer; ValueError for op=Adasum,
    a predivide factor with op != Average, backward_passes_per_step < 1."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("DistributedOptimizer needs a Keras 3 optimizer (keras.optimizers.*), "
                        "got %s" % type(optimizer).__name__)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == Adasum:
        raise ValueError("op == Adasum is not supported yet with Keras")
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be > 0, got %r"
                         % (backward_passes_per_step,))
    groups = check_groups(num_groups, groups)
    base = optimizer.__class__
    if getattr(base, "_tutti_distributed", False):
        raise ValueError("the optimizer is a DistributedOptimizer already")
    cls = _distributed_class(base, name or "Distributed%s" % base.__name__, device_dense,
                             device_sparse, compression, sparse_as_dense,
                             gradient_predivide_factor, op, groups, process_set,
                             scale_local_gradients)
    opt = cls.from_config(optimizer.get_config())
    opt._tutti_bpps = int(backward_passes_per_step)
    opt._tutti_sparse_as_dense = sparse_as_dense
    opt._tutti_average_aggregated = average_aggregated_gradients
    return opt


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average, groups=None,
                                process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose local_layers' (a Keras layer or a list of
    them) trainable weights keep their local gradients (not reduced; divided
    by the set's size with scale_local_gradients), as Horovod's
    hvd.keras.PartialDistributedOptimizer. op: Average or Sum (ValueError
    otherwise, as Horovod's); ValueError for a local layer that is not a
    keras.layers.Layer."""
    if op not in (Average, Sum):
        raise ValueError("op currently only supports Average and Sum")
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of keras.layers.Layer type.")
    opt = DistributedOptimizer(optimizer, name=name, device_dense=device_dense,
                               device_sparse=device_sparse, compression=compression,
                               sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt


def broadcast_global_variables(root_rank):
    """Broadcasts the default TF1 graph's global variables from root_rank in
    the default session (Horovod's hvd.keras.broadcast_global_variables).
    RuntimeError when executing eagerly (use
    callbacks.BroadcastGlobalVariablesCallback or
    tutti.tensorflow.broadcast_variables), ValueError without a default session."""
    op = _functions.broadcast_global_variables(root_rank)
    session = tf.compat.v1.get_default_session()
    if session is None:
        raise ValueError("broadcast_global_variables runs in the default session: call it "
                         "inside `with session.as_default():`")
    return session.run(op)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Allreduce of a value (anything tf.constant takes); returns a tensor
    (Horovod's hvd.keras.allreduce, eager)."""
    return _collectives.allreduce(tf.constant(value), average=average,
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, op=op,
                                  compression=compression)


def allgather(value, name=None):
    """Allgather of a value along its first dimension (Horovod's hvd.keras.allgather)."""
    return _mpi_ops.allgather(tf.constant(value))


def broadcast(value, root_rank, name=None):
    """root_rank's value on every rank (Horovod's hvd.keras.broadcast)."""
    return _mpi_ops.broadcast(tf.constant(value), root_rank)


def reducescatter(value, name=None, op=Average):
    """Reducescatter of a value (Horovod's hvd.keras.reducescatter)."""
    return _collectives.reducescatter(tf.constant(value), op=op)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """keras.models.load_model whose compiled optimizer becomes a
    DistributedOptimizer (its state kept), as Horovod's hvd.keras.load_model.
    custom_optimizers: optimizer classes of the saved model to make known;
    legacy_opts (Keras 2 legacy optimizers) is not supported in Keras 3."""
    if legacy_opts:
        raise NotImplementedError("legacy_opts: Keras 3 has no legacy optimizers")
    objects = dict(custom_objects or {})
    objects.update({cls.__name__: cls for cls in custom_optimizers or ()})
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    opt = getattr(model, "optimizer", None)
    if opt is not None and not getattr(type(opt), "_tutti_distributed", False):
        base = type(opt)
        opt.__class__ = _distributed_class(base, "Distributed%s" % base.__name__, "", "",
                                           compression, False, 1.0, Average, None,
                                           global_process_set, True)
    return model

"""DistributedOptimizer of a TensorFlow 1 optimizer (tf.compat.v1.train.Optimizer;
Horovod's _DistributedOptimizer in horovod/tensorflow/__init__.py, 0.28.1).

compute_gradients() (and so minimize()) returns the gradients averaged over
the process set, by the same allreduces as DistributedGradientTape;
apply_gradients() and the slots are the wrapped optimizer's. Made for TF1
graphs (tf.compat.v1, run in a session) and usable eagerly with
backward_passes_per_step == 1. backward_passes_per_step > 1 aggregates
locally (tutti.tensorflow.gradient_aggregation): graph mode only, as
Horovod's (ValueError eagerly); run tf.compat.v1.local_variables_initializer()
for its variables. On the passes that do not apply, global_step (when
given) is still incremented, as Horovod's.
"""

import tensorflow as tf

from tutti.tensorflow.gradient_aggregation import LocalGradientAggregator
from tutti.tensorflow.gradient_tape import _key, allreduce_grads_fn, reduce_with_locals


class DistributedOptimizerV1(tf.compat.v1.train.Optimizer):
    """A tf.compat.v1.train.Optimizer whose compute_gradients() averages the
    wrapped optimizer's gradients over the process set."""

    def __init__(self, optimizer, name, use_locking, reduce_kwargs, backward_passes_per_step,
                 average_aggregated_gradients, process_set, scale_local_gradients):
        """reduce_kwargs: allreduce_grads_fn's device_dense, device_sparse,
        compression, sparse_as_dense, op, gradient_predivide_factor, groups."""
        if name is None:
            name = "Distributed%s" % type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._name_prefix = name
        self._reduce_kwargs = dict(reduce_kwargs)
        self._local_vars = set()
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._agg = None
        if backward_passes_per_step > 1:
            if tf.executing_eagerly():
                raise ValueError("backward_passes_per_step > 1 is not yet supported for "
                                 "_LegacyOptimizer with eager execution.")
            self._agg = LocalGradientAggregator(backward_passes_per_step, self._reduce,
                                                reduce_kwargs["sparse_as_dense"],
                                                average_aggregated_gradients)

    def _reduce(self, grads, variables):
        fn = allreduce_grads_fn(self._name_prefix, process_set=self.process_set,
                                **self._reduce_kwargs)
        return reduce_with_locals(fn, list(grads), list(variables), self._local_vars,
                                  self.process_set, self.scale_local_gradients)

    def register_local_var(self, var):
        """Marks `var` as local to this rank: its gradient is not reduced."""
        self._local_vars.add(_key(var))

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's [(gradient, variable)], gradients reduced
        (with aggregation: on every backward_passes_per_step-th pass)."""
        grads_and_vars = self._optimizer.compute_gradients(*args, **kwargs)
        grads, variables = zip(*grads_and_vars)
        if self._agg is not None:
            grads = self._agg.compute_gradients(list(grads), list(variables))
        else:
            grads = self._reduce(grads, variables)
        return list(zip(grads, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's apply_gradients (with aggregation: on the
        reducing passes only; the others increment global_step)."""
        grads_and_vars = list(grads_and_vars)
        if self._agg is None:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                   name=name)

        def skip():
            if global_step is None:
                return None
            return global_step.assign_add(tf.constant(1, global_step.dtype.base_dtype))

        return self._agg.apply_gradients(
            lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                    name=name),
            skip, [g for g, _ in grads_and_vars])

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)

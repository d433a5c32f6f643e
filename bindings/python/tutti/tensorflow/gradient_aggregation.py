"""Local gradient aggregation: backward_passes_per_step > 1 of the
DistributedOptimizers (Horovod's horovod/tensorflow/gradient_aggregation.py
and gradient_aggregation_eager.py, 0.28.1).

Each backward pass adds its gradients to per-variable sums (non-trainable
float variables of the variables' shapes) and counts; on every
backward_passes_per_step-th pass the sums are reduced over the process set
(the optimizer's allreduce), divided by backward_passes_per_step when
average_aggregated_gradients, cleared, and the optimizer applies them. On
the other passes nothing is communicated and the optimizer only counts the
step (its iterations, or the TF1 global_step), as Horovod's. Every rank of
the set must run the same number of passes (the reduction runs on the same
passes everywhere).

Works eagerly, inside tf.function (tf.cond picks the pass's branch) and in
a TensorFlow 1 graph, where the sums and the counter are local variables
(tf.compat.v1.GraphKeys.LOCAL_VARIABLES: run local_variables_initializer()).
IndexedSlices gradients need sparse_as_dense=True (ValueError otherwise, as
Horovod's).
"""

import tensorflow as tf

from tutti.tensorflow.gradient_tape import _key


def _zeros_variable(shape, dtype, name):
    """A non-trainable variable of zeros made outside any tf.function being traced."""
    with tf.init_scope():
        return tf.compat.v1.Variable(tf.zeros(shape, dtype), trainable=False, name=name,
                                     use_resource=True,
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])


def _after(deps, value_fn):
    """value_fn() once every op or tensor of deps (None skipped) ran."""
    with tf.control_dependencies([d for d in deps if d is not None]):
        return value_fn()


class LocalGradientAggregator:
    """Sums gradients over backward_passes_per_step passes and reduces them
    once. reduce_fn(grads, variables) -> reduced grads (the optimizer's
    allreduce, local variables left out)."""

    def __init__(self, backward_passes_per_step, reduce_fn, sparse_as_dense,
                 average_aggregated_gradients):
        if int(backward_passes_per_step) < 1:
            raise ValueError("backward_passes_per_step must be > 0, got %r"
                             % (backward_passes_per_step,))
        self.backward_passes_per_step = int(backward_passes_per_step)
        self._reduce = reduce_fn
        self._sparse_as_dense = sparse_as_dense
        self._average = average_aggregated_gradients
        self._sums = {}
        self._counter = None

    def _dense(self, grad):
        if not isinstance(grad, tf.IndexedSlices):
            return grad
        if not self._sparse_as_dense:
            raise ValueError("IndexedSlices are not supported when `backward_passes_per_step` "
                             "> 1 and `sparse_as_dense` is False.")
        return tf.convert_to_tensor(grad)

    def _sum_of(self, var, grad):
        key = _key(var)
        if key not in self._sums:
            shape = var.shape if tf.TensorShape(var.shape).is_fully_defined() else grad.shape
            self._sums[key] = _zeros_variable(shape, grad.dtype, "tutti_aggregated_grad")
        return self._sums[key]

    def _count(self):
        if self._counter is None:
            self._counter = _zeros_variable((), tf.int64, "tutti_aggregation_counter")
        return self._counter

    def clear(self):
        """Drops the partial sums and restarts the count at pass 0 (eagerly;
        elastic states call it on restore and sync, so that every rank
        reduces on the same passes afterwards)."""
        for total in self._sums.values():
            total.assign(tf.zeros_like(total))
        if self._counter is not None:
            self._counter.assign(0)

    def compute_gradients(self, grads, variables):
        """Adds grads (None: no gradient) to the sums; returns, in input order,
        the reduced sums on every backward_passes_per_step-th call, the
        gradients as given (made dense) on the others."""
        grads = [self._dense(g) for g in grads]
        present = [i for i, g in enumerate(grads) if g is not None]
        sums = [self._sum_of(variables[i], grads[i]) for i in present]
        counter = self._count()
        adds = [s.assign_add(grads[i], read_value=False) for s, i in zip(sums, present)]
        count = _after(adds + [counter.assign_add(1, read_value=False)], counter.read_value)

        def reduce_and_clear():
            reduced = self._reduce([s.read_value() for s in sums], [variables[i] for i in present])
            if self._average:
                reduced = [r / self.backward_passes_per_step for r in reduced]
            clears = _after(reduced, lambda: [s.assign(tf.zeros_like(s), read_value=False)
                                              for s in sums]
                            + [counter.assign(0, read_value=False)])
            return _after(clears, lambda: [tf.identity(r) for r in reduced])

        def local():
            return [tf.identity(grads[i]) for i in present]

        if not present:
            return list(grads)
        out = tf.cond(tf.equal(count, self.backward_passes_per_step), reduce_and_clear, local)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        result = list(grads)
        for i, g in zip(present, out):
            result[i] = g
        return result

    def apply_gradients(self, apply_fn, skip_fn, grads):
        """apply_fn() on the passes whose compute_gradients reduced, skip_fn()
        on the others (both: an op, a tensor or None), once grads are
        computed. Returns a bool tensor: whether this pass applied."""
        counter = self._count()

        def branch(fn, applied):
            return lambda: _after([fn()], lambda: tf.constant(applied))

        return _after(grads, lambda: tf.cond(tf.equal(counter.read_value(), 0),
                                             branch(apply_fn, True), branch(skip_fn, False)))

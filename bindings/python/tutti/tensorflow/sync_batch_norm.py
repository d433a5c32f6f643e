"""SyncBatchNormalization: Keras 3 batch normalization whose training-time
statistics are those of the whole batch over every rank (Horovod's
horovod/tensorflow/sync_batch_norm.py, 0.28.1).

Each rank sums its inputs, their squares and its element count over the
reduction axes (masked elements left out); one Sum allreduce of the three
gives the global mean and variance (E[x^2] - E[x]^2, as Horovod's), so
ranks may hold batches of different sizes (Horovod's averages the per-rank
moments, which is exact for equal sizes only). Inference uses the moving
statistics, which every rank updates alike. The allreduce's gradient is the
allreduce of the gradient, so the backward pass is synchronized too. Every
rank must call the layer in training the same number of times; on one rank
it is keras.layers.BatchNormalization.
"""

import keras
import tensorflow as tf

from tutti import basics as _basics
from tutti.tensorflow import mpi_ops


@keras.saving.register_keras_serializable(package="tutti")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization (its arguments: axis, momentum,
    epsilon, ...) with statistics synchronized over every rank in training.
    Inputs: float tensors, any rank >= 2; the output has the input's shape
    and dtype. fused: accepted as Horovod's; only False (ValueError for True
    or None: there is no fused kernel). Default name: sync_batch_normalization
    (made unique by Keras)."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True (got fused=%r)"
                             % (fused,))
        super().__init__(**kwargs)

    def _moments(self, inputs, mask):
        if _basics.size() == 1:
            return super()._moments(inputs, mask)
        x = tf.convert_to_tensor(inputs)
        axes = list(self._reduction_axes)
        if mask is None:
            count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
            total = tf.reduce_sum(x, axes)
            squares = tf.reduce_sum(tf.square(x), axes)
            count = tf.fill(tf.shape(total), count)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(x)), x.dtype)
            total = tf.reduce_sum(x * weights, axes)
            squares = tf.reduce_sum(tf.square(x) * weights, axes)
            count = tf.reduce_sum(weights, axes)
        stats = mpi_ops._allreduce(tf.stack([total, squares, count]), op=mpi_ops.Sum)
        total, squares, count = tf.unstack(stats)
        count = tf.maximum(count, 1.0)
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)
        return mean, variance

    def get_config(self):
        config = super().get_config()
        config["fused"] = False
        return config

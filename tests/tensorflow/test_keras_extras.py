"""The Keras DistributedOptimizer's local gradient aggregation
(backward_passes_per_step), PartialDistributedOptimizer and
SyncBatchNormalization, against references computed from every rank's data
locally with numpy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tutti.keras as hvd_keras
import tutti.tensorflow as hvd


def rank_data(r, n=6):
    rng = np.random.default_rng(31 + r)
    return rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=(n, 1)).astype(np.float32)


def local_grad(w, x, y):
    return 2.0 * x.T @ (x @ w - y) / len(x)


def mean_grad(w):
    return np.mean([local_grad(w, *rank_data(k)) for k in range(hvd.size())], axis=0)


W0 = np.array([[0.3], [0.1], [-0.4]], dtype=np.float32)


@pytest.mark.parametrize("in_function", [False, True])
@pytest.mark.parametrize("average", [False, True])
def test_backward_passes_per_step_sums_locally_then_reduces(in_function, average):
    w = keras.Variable(W0)
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0),
                                         backward_passes_per_step=3,
                                         average_aggregated_gradients=average)
    x, y = rank_data(hvd.rank())

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ tf.convert_to_tensor(w) - y) ** 2)
        opt.apply(tape.gradient(loss, [w]), [w])

    step = tf.function(step) if in_function else step
    seen = []
    for _ in range(6):
        step()
        seen.append(keras.ops.convert_to_numpy(w))
    factor = 1 if average else 3
    w3 = W0 - factor * mean_grad(W0)
    for k in range(2):
        np.testing.assert_array_equal(seen[k], W0)
    np.testing.assert_allclose(seen[2], w3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seen[4], w3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seen[5], w3 - factor * mean_grad(w3), rtol=1e-4, atol=1e-5)
    assert int(keras.ops.convert_to_numpy(opt.iterations)) == 6


def test_backward_passes_per_step_in_model_fit():
    """SGD(lr) with 2 passes per step in model.fit: the same weights on
    every rank, equal to a numpy replay of summed-then-averaged gradients."""
    n, r = hvd.size(), hvd.rank()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False,
                                                                    kernel_initializer="zeros")])
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.05), backward_passes_per_step=2)
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    x, y = rank_data(r, 12)
    model.fit(x, y, batch_size=6, epochs=2, shuffle=False, verbose=0)
    w = np.zeros((3, 1), np.float32)
    for _ in range(2):  # epochs: batches 0 and 1, then one reduction of their sum
        total = np.zeros_like(w)
        for k in range(n):
            xk, yk = rank_data(k, 12)
            total += local_grad(w, xk[:6], yk[:6]) + local_grad(w, xk[6:], yk[6:])
        w = w - 0.05 * total / n
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.weights[0]), w, rtol=1e-4,
                               atol=1e-6)


def test_partial_distributed_optimizer_keeps_local_layers_local():
    local = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    local.build((None, 3))
    shared = keras.Variable(W0)
    opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0),
                                                local_layers=local)
    x, y = rank_data(hvd.rank())
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((x @ tf.convert_to_tensor(shared) + local(x) - y) ** 2)
    g_shared, g_local = tape.gradient(loss, [shared, local.kernel])
    everyone = hvd.allgather(g_shared[None]).numpy()
    opt.apply([g_shared, g_local], [shared, local.kernel])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(shared), W0 - everyone.mean(axis=0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(local.kernel),
                               1.0 - g_local.numpy() / hvd.size(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="Layer"):
        hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(), local_layers=[object()])
    with pytest.raises(ValueError, match="Average and Sum"):
        hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(), op=hvd.Max)


def sync_bn_batch(r, channels_last):
    """Rank r's batch: r + 1 samples (uneven on purpose) of 3 channels x 2."""
    rng = np.random.default_rng(50 + r)
    x = rng.normal(loc=r, size=(r + 1, 2, 3)).astype(np.float32)
    return x if channels_last else np.transpose(x, (0, 2, 1))


@pytest.mark.parametrize("axis", [-1, 1])
def test_sync_batch_normalization_uses_the_global_batch(axis):
    """The layer on each rank's batch matches keras' BatchNormalization on
    the concatenation of every rank's batch (outputs, moving statistics)."""
    r, n = hvd.rank(), hvd.size()
    everything = np.concatenate([sync_bn_batch(k, axis == -1) for k in range(n)])
    plain = keras.layers.BatchNormalization(axis=axis, momentum=0.5)
    want = keras.ops.convert_to_numpy(plain(everything, training=True))
    sync = hvd.SyncBatchNormalization(axis=axis, momentum=0.5)
    mine = sync_bn_batch(r, axis == -1)
    call = tf.function(lambda x: sync(x, training=True))
    call(tf.constant(mine))  # build and one step in a tf.function
    sync.moving_mean.assign(keras.ops.zeros_like(sync.moving_mean))
    sync.moving_variance.assign(keras.ops.ones_like(sync.moving_variance))
    got = keras.ops.convert_to_numpy(sync(mine, training=True))  # eagerly
    start = sum(k + 1 for k in range(r))
    np.testing.assert_allclose(got, want[start:start + r + 1], rtol=1e-4, atol=1e-4)
    for name in ("moving_mean", "moving_variance"):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(getattr(sync, name)),
                                   keras.ops.convert_to_numpy(getattr(plain, name)),
                                   rtol=1e-4, atol=1e-5)
    assert sync.name.startswith("sync_batch_normalization")
    with pytest.raises(ValueError, match="fused"):
        hvd.SyncBatchNormalization(fused=True)


def test_sync_batch_normalization_gradient_is_the_global_one():
    """d(sum over ranks of sum(y * c))/dx on each rank equals the gradient of
    the plain layer on the concatenated batch (rows of this rank)."""
    r, n = hvd.rank(), hvd.size()
    everything = np.concatenate([sync_bn_batch(k, True) for k in range(n)])
    coeff = np.linspace(-1.0, 1.0, everything.size).reshape(everything.shape).astype(np.float32)
    plain = keras.layers.BatchNormalization()
    xs = tf.constant(everything)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = tf.reduce_sum(plain(xs, training=True) * coeff)
    want = tape.gradient(loss, xs).numpy()
    start = sum(k + 1 for k in range(r))
    x = tf.constant(sync_bn_batch(r, True))
    sync = hvd.SyncBatchNormalization()
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(sync(x, training=True) * coeff[start:start + r + 1])
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), want[start:start + r + 1],
                               rtol=1e-3, atol=1e-4)

"""tutti.tensorflow's training API: DistributedGradientTape, the Keras
DistributedOptimizer and callbacks, broadcast_variables and the object
functions, against references computed from every rank's data locally."""

import numpy as np
import pytest
import tensorflow as tf

import keras

import tutti.keras as hvd_keras
import tutti.tensorflow as hvd
import tutti.tensorflow.keras as hvd_tf_keras


def rank_data(r):
    rng = np.random.default_rng(100 + r)
    return rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 1)).astype(np.float32)


def local_grads(w, x, y):
    """Gradient of mean((x w - y)^2) with respect to w, in numpy."""
    return 2.0 * x.T @ (x @ w - y) / len(x)


def mean_grad(w):
    return np.mean([local_grads(w, *rank_data(r)) for r in range(hvd.size())], axis=0)


W0 = np.array([[0.1], [-0.2], [0.3]], dtype=np.float32)


def tape_grads(**kwargs):
    w = tf.Variable(W0)
    x, y = rank_data(hvd.rank())
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((x @ w - y) ** 2)
    tape = hvd.DistributedGradientTape(tape, **kwargs)
    return tape.gradient(loss, [w])[0].numpy()


@pytest.mark.parametrize("kwargs", [{}, {"gradient_predivide_factor": 2.0}, {"groups": 1},
                                    {"compression": hvd.Compression.fp16}],
                         ids=["plain", "predivide", "groups", "fp16"])
def test_distributed_gradient_tape_averages(kwargs):
    rtol = 2e-3 if "compression" in kwargs else 1e-5
    np.testing.assert_allclose(tape_grads(**kwargs), mean_grad(W0), rtol=rtol, atol=1e-6)


def test_tape_in_tf_function_and_sparse_gradients():
    emb = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))
    idx = tf.constant([hvd.rank() % 6, 5])

    @tf.function
    def step(sparse_as_dense):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(emb, idx))
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
        g = tape.gradient(loss, [emb])[0]
        return tf.convert_to_tensor(g), isinstance(g, tf.IndexedSlices)

    want = np.zeros((6, 2))
    for r in range(hvd.size()):
        want[r % 6] += 1.0 / hvd.size()
        want[5] += 1.0 / hvd.size()
    dense, _ = step(True)
    np.testing.assert_allclose(dense.numpy(), want, rtol=1e-6)
    sliced, _ = step(False)
    np.testing.assert_allclose(sliced.numpy(), want, rtol=1e-6)


def test_partial_tape_keeps_local_layer_gradients():
    layer = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    shared = tf.Variable(W0)
    x, y = rank_data(hvd.rank())
    layer.build((None, 3))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((x @ shared + layer(x) - y) ** 2)
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[layer])
    g_shared, g_local = tape.gradient(loss, [shared, layer.kernel])
    with tf.GradientTape() as plain:
        loss = tf.reduce_mean((x @ shared + layer(x) - y) ** 2)
    local = plain.gradient(loss, layer.kernel).numpy()
    np.testing.assert_allclose(g_local.numpy(), local / hvd.size(), rtol=1e-5)
    assert g_shared.shape == (3, 1)


@pytest.mark.parametrize("in_function", [False, True])
def test_keras_distributed_optimizer_applies_the_average(in_function):
    w = keras.Variable(W0)
    opt = hvd_tf_keras.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0))
    assert type(opt).__name__ == "SGD" and isinstance(opt, keras.optimizers.SGD)
    g = tf.constant(local_grads(W0, *rank_data(hvd.rank())))
    apply = (tf.function(lambda: opt.apply([g], [w])) if in_function
             else lambda: opt.apply([g], [w]))
    apply()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(w), W0 - mean_grad(W0), rtol=1e-5)


def make_model():
    keras.utils.set_random_seed(1234 + hvd.rank())  # differs per rank: broadcast fixes it
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"),
                             keras.layers.Dense(1)])


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch_logs, self.lrs = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_logs.append(dict(logs))


def test_model_fit_with_the_callbacks():
    n = hvd.size()
    x, y = rank_data(hvd.rank())
    model = make_model()
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                  loss="mse")
    raw, averaged, after_warmup = Recorder(), Recorder(), Recorder()
    cbs = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0), raw,
           hvd_keras.callbacks.MetricAverageCallback(), averaged,
           hvd_keras.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=2),
           after_warmup]
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=cbs)
    weights = np.concatenate([keras.ops.convert_to_numpy(v).ravel() for v in model.weights])
    everyone = hvd.allgather(tf.constant(weights[None, :])).numpy()
    for k in range(n):
        np.testing.assert_array_equal(everyone[k], weights, err_msg="rank %d differs" % k)
    raw_losses = hvd.allgather(tf.constant([[lg["loss"] for lg in raw.epoch_logs]])).numpy()
    np.testing.assert_allclose([lg["loss"] for lg in averaged.epoch_logs], raw_losses.mean(0),
                               rtol=1e-5)
    lrs = after_warmup.lrs  # 2 steps per epoch: epoch + (batch + 1) / 2
    want = [0.1 / n * ((e + (b + 1) / 2.0) * (n - 1) / 2 + 1) for e in range(2) for b in range(2)]
    np.testing.assert_allclose(lrs, want, rtol=1e-5)


def test_learning_rate_schedule_staircase():
    model = make_model()
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                  loss="mse")
    rec = Recorder()
    sched = hvd_keras.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=0.5,
                                                             start_epoch=1)
    x, y = rank_data(hvd.rank())
    model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[sched, rec])
    np.testing.assert_allclose(rec.lrs, [0.1, 0.1, 0.05], rtol=1e-6)


def test_broadcast_variables_and_objects():
    r, root = hvd.rank(), hvd.size() - 1
    v = [tf.Variable(np.full((2,), float(r))), keras.Variable(np.full((3,), float(r) + 0.5))]
    hvd.broadcast_variables(v, root_rank=root)
    np.testing.assert_array_equal(v[0].numpy(), [root, root])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(v[1]), [root + 0.5] * 3)
    obj = hvd.broadcast_object({"rank": r, "tag": "x" * r}, root_rank=root)
    assert obj == {"rank": root, "tag": "x" * root}
    assert hvd.allgather_object(("r", r)) == [("r", k) for k in range(hvd.size())]


def test_distributed_optimizer_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match="backward_passes_per_step must be > 0"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=0)
    with pytest.raises(ValueError, match="Adasum"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Adasum)
    with pytest.raises(TypeError, match="Keras 3 optimizer"):
        hvd_tf_keras.DistributedOptimizer(object())


def test_load_model_gives_a_distributed_optimizer(tmp_path):
    x, y = rank_data(hvd.rank())
    model = make_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, epochs=1, verbose=0)
    path = str(tmp_path / ("model%d.keras" % hvd.rank()))
    model.save(path)
    loaded = hvd_keras.load_model(path)
    assert getattr(type(loaded.optimizer), "_tutti_distributed", False)
    hvd.broadcast_variables(loaded.variables, root_rank=0)
    loaded.fit(x, y, batch_size=8, epochs=1, verbose=0)
    weights = np.concatenate([keras.ops.convert_to_numpy(v).ravel() for v in loaded.weights])
    everyone = hvd.allgather(tf.constant(weights[None, :])).numpy()
    for k in range(hvd.size()):
        np.testing.assert_array_equal(everyone[k], weights)

"""TensorFlow 1 graphs (tf.compat.v1, a Session) and in-place broadcasts:
broadcast_, broadcast_global_variables and its hook, the object functions in
a session, and DistributedOptimizer of a tf.compat.v1.train.Optimizer (with
local gradient aggregation), against references computed locally."""

import numpy as np
import pytest
import tensorflow as tf

import tutti.keras as hvd_keras
import tutti.tensorflow as hvd

v1 = tf.compat.v1


def graph_session():
    graph = tf.Graph()
    return graph, v1.Session(graph=graph)


@pytest.mark.parametrize("dtype", [tf.uint8, tf.int32, tf.float16, tf.float64, tf.bool])
def test_broadcast_in_place_eagerly(dtype):
    r, n = hvd.rank(), hvd.size()
    for root in range(n):
        shapes = [(3,), (2, 5)]
        variables = [tf.Variable(tf.cast(tf.fill(s, r + 1), dtype)) for s in shapes]
        out = hvd.broadcast_(variables, root)
        for var, value, s in zip(variables, out, shapes):
            want = np.full(s, root + 1).astype(dtype.as_numpy_dtype)
            assert value.dtype == dtype
            np.testing.assert_array_equal(value.numpy(), want)
            np.testing.assert_array_equal(var.numpy(), want)


@pytest.mark.parametrize("use_resource", [False, True])
def test_broadcast_in_place_in_a_graph(use_resource):
    r, root = hvd.rank(), hvd.size() - 1
    graph, sess = graph_session()
    with graph.as_default(), sess:
        variables = [v1.Variable(np.full((4,), float(r) + k), use_resource=use_resource)
                     for k in range(3)]
        out = hvd.broadcast_(variables, root, name="inplace")
        sess.run(v1.global_variables_initializer())
        values = sess.run(out)
        for k, (var, value) in enumerate(zip(variables, values)):
            np.testing.assert_array_equal(value, np.full((4,), float(root) + k))
            np.testing.assert_array_equal(sess.run(var), value)


def test_broadcast_in_place_refuses_mixed_kinds():
    graph, _ = graph_session()
    with graph.as_default():
        mixed = [v1.Variable([1.0], use_resource=False), v1.Variable([1.0], use_resource=True)]
        with pytest.raises(ValueError, match="same kind"):
            hvd.broadcast_(mixed, 0)


def test_broadcast_global_variables_in_a_graph_and_not_eagerly():
    with pytest.raises(RuntimeError, match="eager"):
        hvd.broadcast_global_variables(0)
    with pytest.raises(RuntimeError, match="eager"):
        hvd_keras.broadcast_global_variables(0)
    r, root = hvd.rank(), hvd.size() - 1
    graph, sess = graph_session()
    with graph.as_default(), sess:
        a = v1.Variable(np.full((2, 2), float(r)), name="a")
        b = v1.Variable(np.arange(3) + r, name="b")
        op = hvd.broadcast_global_variables(root)
        sess.run(v1.global_variables_initializer())
        sess.run(op)
        np.testing.assert_array_equal(sess.run(a), np.full((2, 2), float(root)))
        np.testing.assert_array_equal(sess.run(b), np.arange(3) + root)
        sess.run(a.assign(a + 1.0))  # hvd.keras's runs in the default session
        hvd_keras.broadcast_global_variables(0)
        np.testing.assert_array_equal(sess.run(a), np.full((2, 2), float(root) + 1.0))


def test_broadcast_global_variables_hook():
    r = hvd.rank()
    graph = tf.Graph()
    with graph.as_default():
        w = v1.Variable(np.full((3,), 10.0 * r + 1.0), name="w")
        hook = hvd.BroadcastGlobalVariablesHook(0)
        with v1.train.MonitoredSession(hooks=[hook]) as sess:
            np.testing.assert_array_equal(sess.run(w), np.full((3,), 1.0))


def test_object_functions_in_a_session():
    r, n, root = hvd.rank(), hvd.size(), hvd.size() - 1
    graph, sess = graph_session()
    with graph.as_default():
        with pytest.raises(ValueError, match="session"):
            hvd.broadcast_object({"r": r})
        assert hvd.broadcast_object({"r": r, "s": "x" * r}, root, session=sess) == \
            {"r": root, "s": "x" * root}
        with sess.as_default():
            assert hvd.allgather_object(("r", r, [r] * r)) == \
                [("r", k, [k] * k) for k in range(n)]
            bcast = hvd.broadcast_object_fn(root_rank=0)
            for value in ({"step": 3 + r}, list(range(r + 2))):
                expected = {"step": 3} if isinstance(value, dict) else [0, 1]
                assert bcast(value) == expected
    with pytest.raises(NotImplementedError, match="tf.function"):
        tf.function(lambda: hvd.broadcast_object(1)).get_concrete_function()


def rank_data(r):
    rng = np.random.default_rng(7 + r)
    return rng.normal(size=(6, 3)).astype(np.float32), rng.normal(size=(6, 1)).astype(np.float32)


def local_grad(w, x, y):
    return 2.0 * x.T @ (x @ w - y) / len(x)


W0 = np.array([[0.5], [-0.25], [1.0]], dtype=np.float32)


def v1_training(steps, **kwargs):
    """w after each of `steps` sess.run(train_op) of SGD(lr 1) wrapped in the
    DistributedOptimizer, and the global step."""
    x, y = rank_data(hvd.rank())
    graph, sess = graph_session()
    with graph.as_default(), sess:
        w = v1.Variable(W0, name="w")
        step = v1.train.get_or_create_global_step()
        loss = tf.reduce_mean((tf.constant(x) @ w - tf.constant(y)) ** 2)
        opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0), **kwargs)
        train = opt.minimize(loss, global_step=step)
        sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
        history = []
        for _ in range(steps):
            sess.run(train)
            history.append(sess.run(w))
        return history, int(sess.run(step))


def mean_grad(w):
    return np.mean([local_grad(w, *rank_data(k)) for k in range(hvd.size())], axis=0)


def test_v1_optimizer_averages_the_gradients_in_a_graph():
    (w1,), step = v1_training(1)
    np.testing.assert_allclose(w1, W0 - mean_grad(W0), rtol=1e-5, atol=1e-6)
    assert step == 1


@pytest.mark.parametrize("average", [False, True])
def test_v1_optimizer_aggregates_backward_passes(average):
    history, step = v1_training(4, backward_passes_per_step=2,
                                average_aggregated_gradients=average)
    np.testing.assert_array_equal(history[0], W0)  # first pass: summed locally only
    w2 = W0 - mean_grad(W0) * (1 if average else 2)
    np.testing.assert_allclose(history[1], w2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(history[2], w2, rtol=1e-5, atol=1e-6)
    w4 = w2 - mean_grad(w2) * (1 if average else 2)
    np.testing.assert_allclose(history[3], w4, rtol=1e-4, atol=1e-5)
    assert step == 4  # incremented on every pass, as Horovod's


def test_v1_optimizer_refusals():
    with pytest.raises(ValueError, match="eager"):
        hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0),
                                 backward_passes_per_step=2)
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0), op=hvd.Adasum)


def test_v1_optimizer_local_variables_and_eager_use():
    """register_local_var keeps a variable's gradient local (divided by the
    size, scale_local_gradients); the wrapper also works eagerly (no
    aggregation), as Horovod's."""
    x, y = rank_data(hvd.rank())
    graph, sess = graph_session()
    with graph.as_default(), sess:
        w = v1.Variable(W0, name="w")
        b = v1.Variable(np.zeros((1,), np.float32), name="b")
        loss = tf.reduce_mean((tf.constant(x) @ w + b - tf.constant(y)) ** 2)
        opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0))
        opt.register_local_var(b)
        train = opt.minimize(loss)
        sess.run(v1.global_variables_initializer())
        sess.run(train)
        local_b = 2.0 * np.mean(x @ W0 - y)
        np.testing.assert_allclose(sess.run(b), [-local_b / hvd.size()], rtol=1e-5)
        np.testing.assert_allclose(sess.run(w), W0 - mean_grad(W0), rtol=1e-5, atol=1e-6)
    w = tf.Variable(W0)
    opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0))
    opt.minimize(lambda: tf.reduce_mean((x @ w - y) ** 2), var_list=[w])
    np.testing.assert_allclose(w.numpy(), W0 - mean_grad(W0), rtol=1e-5, atol=1e-6)


def test_aggregation_needs_sparse_as_dense_for_indexed_slices():
    graph, sess = graph_session()
    with graph.as_default(), sess:
        emb = v1.Variable(np.ones((4, 2), np.float32), name="emb")
        loss = tf.reduce_sum(tf.gather(emb, [hvd.rank() % 4]))
        sgd = v1.train.GradientDescentOptimizer(1.0)
        with pytest.raises(ValueError, match="sparse_as_dense"):
            hvd.DistributedOptimizer(sgd, backward_passes_per_step=2).minimize(loss)
        train = hvd.DistributedOptimizer(sgd, backward_passes_per_step=2,
                                         sparse_as_dense=True).minimize(loss)
        sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
        sess.run(train)
        sess.run(train)
        want = np.ones((4, 2))
        for k in range(hvd.size()):
            want[k % 4] -= 2.0 / hvd.size()  # two passes summed, averaged over ranks
        np.testing.assert_allclose(sess.run(emb), want, rtol=1e-6)

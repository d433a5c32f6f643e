"""Gradients of tutti.tensorflow's ops (Horovod's rules, mpi_ops.py) against
their analytic values, eagerly and in tf.function."""

import numpy as np
import pytest
import tensorflow as tf

import tutti.tensorflow as hvd


def grad_of(fn, x, upstream, in_function=False):
    def compute(x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return tape.gradient(y, x, output_gradients=upstream)

    return (tf.function(compute) if in_function else compute)(x, upstream).numpy()


@pytest.mark.parametrize("in_function", [False, True])
def test_allreduce_grad_is_the_allreduce_of_the_gradient(in_function):
    n, r = hvd.size(), hvd.rank()
    x = tf.constant([1.0, 2.0, 3.0])
    up = tf.constant([1.0, 2.0, 3.0]) * (r + 1)
    g = grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum), x, up, in_function)
    np.testing.assert_allclose(g, np.array([1.0, 2.0, 3.0]) * sum(k + 1 for k in range(n)))
    g = grad_of(lambda t: hvd.allreduce(t, op=hvd.Average, prescale_factor=2.0), x, up,
                in_function)
    np.testing.assert_allclose(g, np.array([1.0, 2.0, 3.0]) * 2.0 * (n + 1) / 2)


def test_allreduce_grad_matches_finite_differences_of_the_global_sum():
    # L = sum_r <w_r, allreduce_sum(x)>: dL/dx on every rank = sum_r w_r, the
    # allreduce of the local gradients (Horovod's rule is this derivative).
    n, r = hvd.size(), hvd.rank()
    w = np.array([0.5, -1.0]) * (r + 1)
    x0 = np.array([0.3, 0.7])
    g = grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum), tf.constant(x0), tf.constant(w))
    eps = 1e-6
    fd = []
    for i in range(2):
        dx = np.zeros(2)
        dx[i] = eps
        total = lambda x: sum(np.dot(np.array([0.5, -1.0]) * (k + 1), n * x) for k in range(n))
        fd.append((total(x0 + dx) - total(x0 - dx)) / (2 * eps) / n)
    np.testing.assert_allclose(g, fd, rtol=1e-5)


@pytest.mark.parametrize("in_function", [False, True])
def test_allgather_grad_is_this_ranks_rows_of_the_averaged_gradient(in_function):
    n, r = hvd.size(), hvd.rank()
    x = tf.ones([r + 1, 2])
    rows = sum(k + 1 for k in range(n))
    up = tf.constant(np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (r + 1))
    g = grad_of(hvd.allgather, x, up, in_function)
    avg = np.arange(rows * 2).reshape(rows, 2) * (n + 1) / 2
    start = sum(k + 1 for k in range(r))
    np.testing.assert_allclose(g, avg[start:start + r + 1])


def test_broadcast_grad_on_root_only():
    n, r = hvd.size(), hvd.rank()
    root = n - 1
    up = tf.constant([2.0, 4.0]) * (r + 1)
    g = grad_of(lambda t: hvd.broadcast(t, root), tf.constant([1.0, 1.0]), up)
    want = np.array([2.0, 4.0]) * (n + 1) / 2 if r == root else np.zeros(2)
    np.testing.assert_allclose(g, want)


def test_alltoall_grad_sends_the_gradient_back():
    n, r = hvd.size(), hvd.rank()
    splits = [1 + (p + r) % 2 for p in range(n)]
    x = tf.ones([sum(splits), 1])

    def fn(t):
        out, _ = hvd.alltoall(t, splits=splits)
        return out

    received = [1 + (r + s) % 2 for s in range(n)]
    # upstream rows tagged with (receiving rank, source rank)
    up = np.concatenate([np.full((received[s], 1), 10.0 * r + s) for s in range(n)])
    g = grad_of(fn, x, tf.constant(up, dtype=tf.float32))
    want = np.concatenate([np.full((splits[p], 1), 10.0 * p + r) for p in range(n)])
    np.testing.assert_allclose(g, want)


def test_reducescatter_grad_is_the_allgather_times_size_for_sum():
    n, r = hvd.size(), hvd.rank()
    x = tf.ones([2 * n, 1])
    up = tf.fill([2, 1], float(r + 1))
    g = grad_of(lambda t: hvd.reducescatter(t, op=hvd.Sum), x, up)
    want = np.concatenate([np.full((2, 1), float(k + 1)) for k in range(n)]) * n
    np.testing.assert_allclose(g, want)
    g = grad_of(lambda t: hvd.reducescatter(t, op=hvd.Average), x, up)
    np.testing.assert_allclose(g, want / n)


def test_grouped_allreduce_grad():
    n = hvd.size()
    xs = [tf.constant([1.0, 2.0]), tf.constant([[3.0]])]
    with tf.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
        loss = tf.reduce_sum(ys[0]) + 2.0 * tf.reduce_sum(ys[1])
    g = tape.gradient(loss, xs)
    np.testing.assert_allclose(g[0].numpy(), [n, n])
    np.testing.assert_allclose(g[1].numpy(), [[2.0 * n]])

"""tutti.tensorflow's collectives against numpy references, every dtype each
op takes, eagerly and in tf.function; process sets; cross-rank errors."""

import numpy as np
import pytest
import tensorflow as tf

import tutti.tensorflow as hvd
from conftest import DTYPES, FLOATS, NUMERIC, as_f64, rank_value

SHAPE = (3, 4)


def all_inputs(shape, dtype, ranks=None):
    ranks = range(hvd.size()) if ranks is None else ranks
    return [rank_value(r, shape, dtype) for r in ranks]


def reference(op, inputs, dtype):
    stack = np.stack([as_f64(x) for x in inputs])
    if dtype == tf.bool:
        stack = stack.astype(bool)
        return {hvd.Sum: stack.any(0), hvd.Max: stack.any(0), hvd.Min: stack.all(0),
                hvd.Product: stack.all(0)}[op]
    if op == hvd.Sum:
        return stack.sum(0)
    if op == hvd.Average:
        s = stack.sum(0)
        return np.trunc(s / len(inputs)) if dtype.is_integer else s / len(inputs)
    return {hvd.Min: stack.min(0), hvd.Max: stack.max(0), hvd.Product: stack.prod(0)}[op]


def tolerance(dtype):
    return {tf.float16: 1e-2, tf.bfloat16: 5e-2}.get(dtype, 1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_allreduce_every_op_and_dtype(dtype):
    x = tf.constant(rank_value(hvd.rank(), SHAPE, dtype))
    ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
    if dtype != tf.bool:
        ops.append(hvd.Average)
    for op in ops:
        out = hvd.allreduce(x, op=op)
        assert out.dtype == dtype and out.shape == SHAPE
        want = reference(op, all_inputs(SHAPE, dtype), dtype)
        np.testing.assert_allclose(as_f64(out.numpy()), as_f64(want), rtol=tolerance(dtype),
                                   err_msg="op %d" % op)


@pytest.mark.parametrize("dtype", [tf.int32, tf.float32, tf.float64])
def test_allreduce_scale_factors_in_tf_function(dtype):
    x = tf.constant(rank_value(hvd.rank(), SHAPE, dtype))

    @tf.function
    def step(t):
        return hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)

    want = sum(np.trunc(as_f64(v) * 0.5) if dtype.is_integer else as_f64(v) * 0.5
               for v in all_inputs(SHAPE, dtype)) * 3.0
    if dtype.is_integer:
        want = np.trunc(want)
    np.testing.assert_allclose(as_f64(step(x).numpy()), want, rtol=1e-6)


def test_allreduce_compression_fp16_within_rounding():
    x = tf.constant(np.linspace(-1, 1, 64, dtype=np.float32) * (hvd.rank() + 1))
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    want = sum(np.linspace(-1, 1, 64) * (r + 1) for r in range(hvd.size()))
    np.testing.assert_allclose(out.numpy(), want, atol=2e-3 * hvd.size() ** 2)
    assert out.dtype == tf.float32


def test_adasum():
    n = hvd.size()
    a = np.array([1.0, 2.0, 3.0]) * (hvd.rank() + 1) + np.array([0.0, hvd.rank(), 0.0])
    x = tf.constant(a)
    if n & (n - 1):
        with pytest.raises(NotImplementedError, match="power of 2"):
            hvd.allreduce(x, op=hvd.Adasum)
        return
    out = hvd.allreduce(x, op=hvd.Adasum).numpy()
    inputs = [np.array([1.0, 2.0, 3.0]) * (r + 1) + np.array([0.0, r, 0.0]) for r in range(n)]
    if n == 1:
        want = inputs[0]
    else:  # two ranks: Horovod's Adasum rule
        u, v = inputs
        d = np.dot(u, v)
        want = (1 - d / (2 * np.dot(u, u))) * u + (1 - d / (2 * np.dot(v, v))) * v
    np.testing.assert_allclose(out, want, rtol=1e-9)


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
def test_grouped_allreduce(dtype):
    shapes = [(2,), (3, 2), (1, 1, 4)]
    xs = [tf.constant(rank_value(hvd.rank(), s, dtype)) for s in shapes]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    for s, out in zip(shapes, outs):
        want = reference(hvd.Sum, all_inputs(s, dtype), dtype)
        np.testing.assert_allclose(as_f64(out.numpy()), want, rtol=tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_allgather_uneven_first_dim(dtype):
    r = hvd.rank()
    x = tf.constant(rank_value(r, (r + 1, 2), dtype))
    out = hvd.allgather(x)
    want = np.concatenate([rank_value(k, (k + 1, 2), dtype) for k in range(hvd.size())])
    assert out.dtype == dtype
    np.testing.assert_array_equal(as_f64(out.numpy()), as_f64(want))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_broadcast(dtype):
    root = hvd.size() - 1
    out = hvd.broadcast(tf.constant(rank_value(hvd.rank(), SHAPE, dtype)), root)
    np.testing.assert_array_equal(as_f64(out.numpy()), as_f64(rank_value(root, SHAPE, dtype)))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_alltoall_with_splits(dtype):
    n, r = hvd.size(), hvd.rank()
    splits = [(r + p) % 3 for p in range(n)]  # rows for each destination
    x = tf.constant(rank_value(r, (sum(splits), 2), dtype))
    out, received = hvd.alltoall(x, splits=splits)
    want_parts = []
    for src in range(n):
        src_splits = [(src + p) % 3 for p in range(n)]
        rows = rank_value(src, (sum(src_splits), 2), dtype)
        start = sum(src_splits[:r])
        want_parts.append(rows[start:start + src_splits[r]])
    np.testing.assert_array_equal(received.numpy(), [(src + r) % 3 for src in range(n)])
    np.testing.assert_array_equal(as_f64(out.numpy()), as_f64(np.concatenate(want_parts)))


def test_alltoall_even_split_in_tf_function():
    n = hvd.size()
    x = tf.constant(np.arange(2 * n, dtype=np.float32) + 100 * hvd.rank())

    @tf.function
    def step(t):
        return hvd.alltoall(t)

    want = np.concatenate([np.arange(2 * n)[2 * hvd.rank():2 * hvd.rank() + 2] + 100 * s
                           for s in range(n)])
    np.testing.assert_array_equal(step(x).numpy(), want)


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
def test_reducescatter(dtype):
    n, r = hvd.size(), hvd.rank()
    d0 = 2 * n + 1
    out = hvd.reducescatter(tf.constant(rank_value(r, (d0, 2), dtype)), op=hvd.Sum)
    total = reference(hvd.Sum, all_inputs((d0, 2), dtype), dtype)
    rows = [d0 // n + (1 if k < d0 % n else 0) for k in range(n)]
    start = sum(rows[:r])
    np.testing.assert_allclose(as_f64(out.numpy()), total[start:start + rows[r]],
                               rtol=tolerance(dtype))


def test_grouped_allgather_and_reducescatter():
    n, r = hvd.size(), hvd.rank()
    xs = [tf.fill([r + 1, 2], float(r)), tf.fill([1], float(r + 10))]
    g = hvd.grouped_allgather(xs)
    np.testing.assert_array_equal(g[0].numpy(), np.concatenate(
        [np.full((k + 1, 2), float(k)) for k in range(n)]))
    np.testing.assert_array_equal(g[1].numpy(), [k + 10.0 for k in range(n)])
    rs = hvd.grouped_reducescatter([tf.ones([n, 3]), tf.ones([n])], op=hvd.Sum)
    np.testing.assert_array_equal(rs[0].numpy(), np.full((1, 3), float(n)))
    np.testing.assert_array_equal(rs[1].numpy(), [float(n)])


def test_indexed_slices_allreduce():
    n, r = hvd.size(), hvd.rank()
    slices = tf.IndexedSlices(tf.fill([1, 2], float(r + 1)), tf.constant([r % 3]),
                              dense_shape=tf.constant([3, 2]))
    out = hvd.allreduce(slices, op=hvd.Average)
    assert isinstance(out, tf.IndexedSlices)
    want = np.zeros((3, 2))
    for k in range(n):
        want[k % 3] += (k + 1) / n
    np.testing.assert_allclose(tf.convert_to_tensor(out).numpy(), want)
    with pytest.raises(NotImplementedError, match="Sum and Average"):
        hvd.allreduce(slices, op=hvd.Max)


def test_barrier_join_and_placement_ops():
    hvd.barrier()
    assert int(hvd.join().numpy()) in range(hvd.size())
    assert int(hvd.size_op().numpy()) == hvd.size()
    assert int(hvd.rank_op().numpy()) == hvd.rank()
    assert int(hvd.local_rank_op().numpy()) == hvd.local_rank()
    assert int(hvd.local_size_op().numpy()) == hvd.local_size()
    assert int(hvd.process_set_included_op().numpy()) == 1


def test_many_ops_in_one_tf_function_fuse_and_complete():
    xs = [tf.fill([5], float(i + hvd.rank())) for i in range(40)]

    @tf.function
    def step(ts):
        return [hvd.allreduce(t, op=hvd.Sum) for t in ts]

    n = hvd.size()
    for i, out in enumerate(step(xs)):
        np.testing.assert_array_equal(out.numpy(), np.full(5, n * i + n * (n - 1) / 2))


def test_process_set_ops():
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        pytest.skip("a process set smaller than the job needs 2 ranks")
    members = [0, n - 1] if n > 2 else [n - 1]  # never every rank (the global set)
    ps = hvd.add_process_set(members)
    try:
        if r not in members:
            with pytest.raises(tf.errors.InvalidArgumentError, match="not in process set"):
                hvd.allreduce(tf.ones([2]), process_set=ps)
            return
        x = tf.constant([float(r), 1.0])
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps).numpy(),
                                      [float(sum(members)), float(len(members))])
        np.testing.assert_array_equal(
            hvd.allgather(tf.fill([1], r), process_set=ps).numpy(), members)
        np.testing.assert_array_equal(hvd.broadcast(x, n - 1, process_set=ps).numpy(),
                                      [n - 1.0, 1.0])
        assert int(hvd.size_op(ps.process_set_id).numpy()) == len(members)
    finally:
        hvd.remove_process_set(ps)


def test_shape_mismatch_fails_on_every_rank_naming_the_tensor():
    if hvd.size() < 2:
        pytest.skip("a mismatch needs 2 ranks")

    @tf.function
    def step():
        return hvd.allreduce(tf.ones([hvd.rank() + 1]), name="mismatched_grad")

    with pytest.raises(tf.errors.FailedPreconditionError, match="mismatched_grad.*shape"):
        step()
    with pytest.raises(tf.errors.FailedPreconditionError, match="dtype"):
        hvd.allgather(tf.ones([1], dtype=tf.float32 if hvd.rank() == 0 else tf.float64))
    # The job goes on after the error.
    assert float(hvd.allreduce(tf.ones([1]), op=hvd.Sum).numpy()[0]) == hvd.size()


@pytest.mark.parametrize("dtype", FLOATS[:1])
def test_bad_arguments_fail_at_once(dtype):
    with pytest.raises(tf.errors.InvalidArgumentError, match="splits"):
        hvd.alltoall(tf.ones([2], dtype=dtype), splits=[5] * hvd.size())
    with pytest.raises(ValueError, match="op="):
        hvd.allreduce(tf.ones([1]), op=42)


def test_unregistered_process_set_is_a_value_error_when_the_op_is_built():
    fake = hvd.ProcessSet([0])
    fake.process_set_id = 10  # as Horovod's test: never registered
    x = tf.ones([4])
    builders = [lambda ps: hvd.allreduce(x, process_set=ps),
                lambda ps: hvd.grouped_allreduce([x, x], process_set=ps),
                lambda ps: hvd.allgather(x, process_set=ps),
                lambda ps: hvd.broadcast(x, 0, process_set=ps),
                lambda ps: hvd.alltoall(x, process_set=ps),
                lambda ps: hvd.reducescatter(x, process_set=ps),
                lambda ps: hvd.barrier(process_set=ps)]
    for build in builders:
        with pytest.raises(ValueError, match="process_set_id 10"):
            build(fake)  # eagerly
        with pytest.raises(ValueError, match="process_set_id 10"):
            tf.function(lambda build=build: build(fake)).get_concrete_function()  # tracing
    if hvd.size() > 1:  # at np 1, [0] is the global set
        removed = hvd.add_process_set([0])
        hvd.remove_process_set(removed)
        with pytest.raises(ValueError, match="not registered"):
            hvd.allreduce(x, process_set=removed)
    assert float(hvd.allreduce(x, op=hvd.Sum).numpy()[0]) == hvd.size()  # nothing was enqueued

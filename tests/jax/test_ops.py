"""Every tutti.jax op, eagerly and under jax.jit, against numpy references
computed from every rank's known input (conftest.rank_value)."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, REAL, as_ref, eager_and_jit, rank_value

import tutti.jax as hvd

OPS = {hvd.Sum: lambda xs: np.sum(xs, axis=0), hvd.Min: lambda xs: np.min(xs, axis=0),
       hvd.Max: lambda xs: np.max(xs, axis=0), hvd.Product: lambda xs: np.prod(xs, axis=0)}


def everyone(shape, dtype):
    return [rank_value(r, shape, dtype) for r in range(hvd.size())]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("jit", [False, True])
def test_allreduce_every_dtype(dtype, jit):
    ops = [hvd.Sum, hvd.Min, hvd.Max] if dtype not in ("bool",) else [hvd.Min, hvd.Max]
    if dtype.startswith("complex"):
        ops = [hvd.Sum]
    x = rank_value(hvd.rank(), (3, 2), dtype)
    for op in ops:
        fn = partial(hvd.allreduce, op=op)
        got = (jax.jit(fn) if jit else fn)(jnp.asarray(x))
        assert got.dtype == jnp.dtype(dtype) and got.shape == (3, 2)
        np.testing.assert_array_equal(as_ref(got), as_ref(OPS[op](everyone((3, 2), dtype))))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bfloat16"])
def test_allreduce_average_product_and_scales(dtype):
    n = hvd.size()
    xs = np.stack([as_ref(v) for v in everyone((5,), dtype)])
    x = jnp.asarray(rank_value(hvd.rank(), (5,), dtype))
    for fn in eager_and_jit(lambda a: (hvd.allreduce(a), hvd.allreduce(a, op=hvd.Product),
                                       hvd.allreduce(a, op=hvd.Sum, prescale_factor=2.0,
                                                     postscale_factor=0.5))):
        average, product, scaled = fn(x)
        want = xs.sum(0) / n
        if dtype == "int32":
            want = np.trunc(want)
        np.testing.assert_allclose(as_ref(average), want, rtol=1e-2)
        np.testing.assert_array_equal(as_ref(product), xs.prod(0))
        np.testing.assert_array_equal(as_ref(scaled), xs.sum(0))


def test_grouped_allreduce_mixed_dtypes_and_tree():
    x = [jnp.asarray(rank_value(hvd.rank(), s, d)) for s, d in
         [((2,), "float32"), ((3, 1), "int64"), ((), "float64")]]
    for fn in eager_and_jit(lambda *a: hvd.grouped_allreduce(list(a), op=hvd.Sum)):
        got = fn(*x)
        for g, a in zip(got, x):
            assert g.dtype == a.dtype and g.shape == a.shape
            np.testing.assert_array_equal(
                as_ref(g), np.sum([as_ref(v) for v in everyone(a.shape, a.dtype.name)], 0))
    tree = {"w": x[0], "b": [x[1], x[2]]}
    got = jax.jit(lambda t: hvd.allreduce_tree(t, op=hvd.Max))(tree)
    np.testing.assert_array_equal(as_ref(got["b"][0]),
                                  np.max([as_ref(v) for v in everyone((3, 1), "int64")], 0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_uneven(dtype):
    n, r = hvd.size(), hvd.rank()
    x = jnp.asarray(rank_value(r, (r + 1, 2), dtype))
    want = np.concatenate([as_ref(rank_value(q, (q + 1, 2), dtype)) for q in range(n)])
    for fn in eager_and_jit(hvd.allgather):
        got = fn(x)
        assert got.dtype == x.dtype and got.shape == (n * (n + 1) // 2, 2)
        np.testing.assert_array_equal(as_ref(got), want)
    got = hvd.allgather(x, sizes=[q + 1 for q in range(n)])
    np.testing.assert_array_equal(as_ref(got), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_every_root(dtype):
    for root in range(hvd.size()):
        x = jnp.asarray(rank_value(hvd.rank(), (4,), dtype))
        for fn in eager_and_jit(lambda a, root=root: hvd.broadcast(a, root)):
            np.testing.assert_array_equal(as_ref(fn(x)), as_ref(rank_value(root, (4,), dtype)))


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "complex64"])
def test_alltoall_even_and_splits(dtype):
    n, r = hvd.size(), hvd.rank()
    x = jnp.asarray(rank_value(r, (2 * n, 3), dtype))
    even = np.concatenate([as_ref(rank_value(q, (2 * n, 3), dtype))[2 * r:2 * r + 2]
                           for q in range(n)])
    for fn in eager_and_jit(hvd.alltoall):
        np.testing.assert_array_equal(as_ref(fn(x)), even)

    def splits_of(q):  # rank q sends (q + p) % 3 rows to rank p
        return [(q + p) % 3 for p in range(n)]

    y = jnp.asarray(rank_value(r, (3 * n, 3), dtype))
    want = []
    for q in range(n):
        offsets = np.cumsum([0] + splits_of(q))
        want.append(as_ref(rank_value(q, (3 * n, 3), dtype))[offsets[r]:offsets[r + 1]])
    for fn in eager_and_jit(lambda a: hvd.alltoall(a, splits=splits_of(r))):
        out, received = fn(y)
        np.testing.assert_array_equal(as_ref(out), np.concatenate(want))
        np.testing.assert_array_equal(np.asarray(received), [splits_of(q)[r] for q in range(n)])


@pytest.mark.parametrize("dtype", REAL)
def test_reducescatter(dtype):
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1  # uneven: the first rank gets one row more
    total = np.sum([as_ref(v) for v in everyone((rows, 2), dtype)], 0)
    start = sum(rows // n + (q < rows % n) for q in range(r))
    mine = total[start:start + rows // n + (r < rows % n)]
    x = jnp.asarray(rank_value(r, (rows, 2), dtype))
    for fn in eager_and_jit(lambda a: hvd.reducescatter(a, op=hvd.Sum)):
        got = fn(x)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(as_ref(got), mine)


def test_barrier_and_program_order():
    hvd.barrier()

    @jax.jit
    def many(a):  # 6 ops in one program: XLA must keep them in this order on every rank
        b = hvd.allreduce(a, op=hvd.Sum)
        hvd.barrier()
        c = hvd.broadcast(a * 2, 0)
        d = hvd.allgather(a)
        e = hvd.allreduce(a, op=hvd.Max)
        return b + c + e, d

    x = jnp.arange(3.0) + hvd.rank()
    n = hvd.size()
    s, d = many(x)
    np.testing.assert_array_equal(s, n * np.arange(3.0) + n * (n - 1) / 2 + 2 * np.arange(3.0)
                                  + np.arange(3.0) + n - 1)
    np.testing.assert_array_equal(d, np.concatenate([np.arange(3.0) + q for q in range(n)]))


def test_process_set():
    n = hvd.size()
    if n < 2:
        pytest.skip("a process set of some ranks needs 2 or more")
    ranks = list(range(1, n))  # everyone but rank 0
    ps = hvd.add_process_set(ranks)
    try:
        if hvd.rank() == 0:
            with pytest.raises(ValueError):
                hvd.allreduce(jnp.ones(2), process_set=ps)
        else:
            x = jnp.asarray(rank_value(hvd.rank(), (3,), "float32"))
            for fn in eager_and_jit(lambda a: (hvd.allreduce(a, op=hvd.Sum, process_set=ps),
                                               hvd.allgather(a, process_set=ps),
                                               hvd.broadcast(a, n - 1, process_set=ps))):
                s, g, b = fn(x)
                vals = [rank_value(q, (3,), "float32") for q in ranks]
                np.testing.assert_array_equal(s, np.sum(vals, 0))
                np.testing.assert_array_equal(g, np.concatenate(vals))
                np.testing.assert_array_equal(b, vals[-1])
    finally:
        hvd.remove_process_set(ps)


def test_objects():
    r = hvd.rank()
    assert hvd.allgather_object({"rank": r, "x": [r] * r}) == [
        {"rank": q, "x": [q] * q} for q in range(hvd.size())]
    assert hvd.broadcast_object(("from", r), root_rank=hvd.size() - 1) == ("from",
                                                                           hvd.size() - 1)


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="dtype int4"):
        hvd.allreduce(jnp.ones(2, dtype=jnp.int4))
    with pytest.raises(ValueError, match="complex"):
        hvd.allreduce(jnp.ones(2, dtype=jnp.complex64), op=hvd.Max)
    with pytest.raises(ValueError, match="root_rank 99"):
        hvd.broadcast(jnp.ones(2), root_rank=99)
    with pytest.raises(ValueError, match="scalar"):
        hvd.allgather(jnp.float32(1))
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(jnp.ones(4), splits=[5] * hvd.size())
    with pytest.raises(ValueError, match="op must be"):
        hvd.allreduce(jnp.ones(2), op=17)


def test_mismatch_fails_on_every_rank_and_the_lane_goes_on():
    if hvd.size() < 2:
        pytest.skip("a mismatch needs 2 ranks")
    x = jnp.ones(3 if hvd.rank() == 0 else 4)  # shapes differ across ranks
    with pytest.raises(hvd.MismatchError, match="ordered collective"):
        with hvd.translated():
            hvd.allreduce(x, op=hvd.Sum).block_until_ready()
    np.testing.assert_array_equal(hvd.allreduce(jnp.ones(2), op=hvd.Sum), [hvd.size()] * 2)

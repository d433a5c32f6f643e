"""Allgather, broadcast, alltoall, reducescatter, barrier and join through
tutti.torch (docs/cases.md 8-16), and the grouped allgather and reducescatter."""

import time

import pytest
import torch

import tutti.torch as hvd

ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.bfloat16, torch.float32, torch.float64, torch.bool]
# torch 2.3+ has uint16/uint32/uint64 (data movement and few kernels; torch 1.13 has none).
WIDE_UNSIGNED = [getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)]
ALL_DTYPES += WIDE_UNSIGNED
needs_peers = pytest.mark.skipif("hvd.size() < 2", reason="needs at least 2 ranks")


def r_s():
    return hvd.rank(), hvd.size()


def fill(shape, value, dtype):
    return torch.full(shape, value, dtype=torch.int64).to(dtype)


# ---- allgather ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_allgather_uneven_first_dimension(dtype):
    r, s = r_s()
    out = hvd.allgather(fill((r + 1, 2, 3), r % 2 if dtype is torch.bool else r, dtype))
    assert out.dtype == dtype
    assert tuple(out.shape) == (s * (s + 1) // 2, 2, 3)
    offset = 0
    for k in range(s):
        block = out[offset:offset + k + 1]
        assert torch.equal(block, fill((k + 1, 2, 3), k % 2 if dtype is torch.bool else k, dtype))
        offset += k + 1


def test_allgather_non_contiguous_and_async():
    r, s = r_s()
    t = (torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * r).t()  # [3, 2]
    out = hvd.synchronize(hvd.allgather_async(t, name="ag_async"))
    assert tuple(out.shape) == (3 * s, 2)
    for k in range(s):
        assert torch.equal(out[3 * k:3 * k + 3], (torch.arange(6.).reshape(2, 3) + 10 * k).t())


@needs_peers
def test_allgather_mismatched_dims_fail_on_every_rank():
    r, _ = r_s()
    with pytest.raises(hvd.MismatchError) as info:
        hvd.allgather(torch.zeros(1, 2 + r), name="ag_bad_dims")
    assert "ag_bad_dims" in str(info.value)
    with pytest.raises(hvd.MismatchError):
        hvd.allgather(torch.zeros([1] * (2 + r)), name="ag_bad_ndim")


def test_allgather_of_a_scalar_is_an_error():
    with pytest.raises(hvd.TuttiError) as info:
        hvd.allgather(torch.tensor(1.0), name="ag_scalar")
    assert str(info.value)


# ---- broadcast ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.bfloat16, torch.float32,
                                   torch.bool])
def test_broadcast_from_every_root(dtype):
    r, s = r_s()
    for root in range(s):
        value = (r + 1) % 2 if dtype is torch.bool else r + 1
        expected = fill((3, 2), (root + 1) % 2 if dtype is torch.bool else root + 1, dtype)
        out = hvd.broadcast(fill((3, 2), value, dtype), root, name="bcast.%d" % root)
        assert torch.equal(out, expected)
        t = fill((3, 2), value, dtype)
        assert hvd.broadcast_(t, root, name="bcast_.%d" % root) is t
        assert torch.equal(t, expected)


def test_broadcast_in_place_non_contiguous():
    r, _ = r_s()
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (r + 1)
    hvd.broadcast_(base.t(), 0, name="bcast_nc")
    assert torch.equal(base, torch.arange(12, dtype=torch.float64).reshape(3, 4))


@needs_peers
def test_broadcast_with_different_roots_fails_on_every_rank():
    r, _ = r_s()
    with pytest.raises(hvd.MismatchError) as info:
        hvd.broadcast(torch.zeros(3), r, name="bcast_bad_root")
    assert "bcast_bad_root" in str(info.value)


# ---- alltoall -------------------------------------------------------------------


def test_alltoall_with_splits():
    r, s = r_s()
    t = torch.full(((r + 1) * s, 2), float(r))
    out, received = hvd.alltoall(t, splits=[r + 1] * s, name="a2a_splits")
    assert torch.equal(received, torch.arange(1, s + 1, dtype=torch.int32))
    assert tuple(out.shape) == (s * (s + 1) // 2, 2)
    offset = 0
    for j in range(s):
        assert torch.equal(out[offset:offset + j + 1], torch.full((j + 1, 2), float(j)))
        offset += j + 1


def test_alltoall_even_without_splits():
    r, s = r_s()
    t = torch.cat([torch.full((2, 3), 100 * r + p, dtype=torch.int32) for p in range(s)])
    out = hvd.alltoall(t, name="a2a_even")
    expected = torch.cat([torch.full((2, 3), 100 * j + r, dtype=torch.int32) for j in range(s)])
    assert torch.equal(out, expected)


def test_alltoall_bad_splits_are_errors():
    r, s = r_s()
    t = torch.zeros(2 * s + 1, 2)
    if s > 1:
        with pytest.raises(hvd.TuttiError):
            hvd.alltoall(t, name="a2a_indivisible")
    with pytest.raises(hvd.TuttiError):
        hvd.alltoall(t, splits=[1] * (s + 1), name="a2a_len")
    with pytest.raises(hvd.TuttiError):
        hvd.alltoall(t, splits=[-1] + [1] * (s - 1), name="a2a_negative")
    with pytest.raises(hvd.TuttiError):
        hvd.alltoall(t, splits=[2 * s + 2] + [0] * (s - 1), name="a2a_too_many")
    # later ops still work
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after_a2a"),
                       torch.full((1,), float(s)))


# ---- reducescatter ------------------------------------------------------------------


def test_reducescatter_sum():
    r, s = r_s()
    rows = torch.arange(4 * s, dtype=torch.float32).unsqueeze(1).repeat(1, 3)
    out = hvd.reducescatter(rows + r, op=hvd.Sum, name="rs_sum")
    full = rows * s + s * (s - 1) / 2
    assert torch.equal(out, full[4 * r:4 * r + 4])


def test_reducescatter_uneven_and_average():
    r, s = r_s()
    d0 = 4 * s + 1  # rank 0 gets one extra row
    rows = torch.arange(d0, dtype=torch.float64).unsqueeze(1) * (r + 1)
    out = hvd.reducescatter(rows, name="rs_avg")  # Average by default
    mine = d0 // s + (1 if r < d0 % s else 0)
    offset = sum(d0 // s + (1 if k < d0 % s else 0) for k in range(r))
    expected = torch.arange(d0, dtype=torch.float64).unsqueeze(1) * (s + 1) / 2
    assert torch.allclose(out, expected[offset:offset + mine], rtol=1e-12)


# ---- grouped allgather and reducescatter ------------------------------------------


def test_grouped_allgather_equals_allgather_of_each():
    r, s = r_s()
    tensors = [fill((r + 1, 2), r, torch.int32), torch.arange(3.0) + 10 * r,
               fill((2 * r, 3), r + 1, torch.float64)]  # rank 0 contributes no rows
    outs = hvd.grouped_allgather(tensors, name="gag")
    assert len(outs) == 3
    for i, t in enumerate(tensors):
        want = hvd.allgather(t, name="gag.check.%d" % i)
        assert outs[i].dtype == t.dtype and torch.equal(outs[i], want)
    assert tuple(outs[0].shape) == (s * (s + 1) // 2, 2)
    outs_async = hvd.synchronize(hvd.grouped_allgather_async(tensors))  # generated names
    assert all(torch.equal(a, b) for a, b in zip(outs, outs_async))


class HorovodStyleFP16:
    """A compressor object as Horovod's (compress -> (tensor, ctx), decompress)."""

    @staticmethod
    def compress(tensor):
        return tensor.half(), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx)


def test_grouped_reducescatter_equals_reducescatter_of_each():
    r, s = r_s()
    tensors = [torch.arange(4.0 * s).unsqueeze(1) * (r + 1),
               torch.full((2 * s + 1, 3), float(r), dtype=torch.float64)]
    outs = hvd.grouped_reducescatter(tensors, name="grs", op=hvd.Sum, postscale_factor=0.5)
    for i, t in enumerate(tensors):
        want = hvd.reducescatter(t, name="grs.check.%d" % i, op=hvd.Sum, postscale_factor=0.5)
        assert torch.equal(outs[i], want)
    assert torch.equal(outs[0], (torch.arange(4.0 * s).unsqueeze(1) * s * (s + 1) / 4)[4 * r:4 * r + 4])
    avg = hvd.synchronize(hvd.grouped_reducescatter_async(tensors))  # Average by default
    assert torch.allclose(avg[1], torch.full_like(avg[1], (s - 1) / 2.0))
    # Horovod's compression= (its Python fp16 compressor runs around each tensor).
    halves = hvd.grouped_reducescatter(tensors, name="grs.fp16", compression=HorovodStyleFP16,
                                       op=hvd.Sum)
    assert [h.dtype for h in halves] == [torch.float32, torch.float64]
    assert torch.equal(halves[0], hvd.reducescatter(tensors[0], name="grs.fp16.check", op=hvd.Sum))


def test_grouped_ops_check_every_tensor_before_enqueuing_any():
    with pytest.raises(hvd.InvalidArgumentError, match="at least one tensor"):
        hvd.grouped_allgather([])
    with pytest.raises(hvd.InvalidArgumentError, match=r"tensors\[1\]"):
        hvd.grouped_reducescatter([torch.zeros(2), "not a tensor"], name="grs.bad")
    # Nothing of the failed group was enqueued: the names are free.
    assert hvd.grouped_reducescatter([torch.zeros(2 * hvd.size())], name="grs.bad", op=hvd.Sum)


# ---- barrier and join ----------------------------------------------------------------


def test_barrier_waits_for_every_rank():
    r, s = r_s()
    hvd.barrier()
    start = time.monotonic()
    time.sleep(0.2 * r)
    hvd.barrier()
    assert time.monotonic() - start >= 0.2 * (s - 1) - 0.05


def test_join_contributes_zeros_and_returns_the_last_rank():
    r, s = r_s()
    early = s - 1
    if r == early and s > 1:
        last = hvd.join()
    else:
        a = hvd.allreduce(torch.full((3,), 6.0), name="join.a")
        b = hvd.allreduce(torch.full((2, 2), 12.0), name="join.b")
        if s > 1:
            assert torch.allclose(a, torch.full((3,), 6.0 * (s - 1) / s))
            assert torch.allclose(b, torch.full((2, 2), 12.0 * (s - 1) / s))
        last = hvd.join()
    lasts = hvd.allgather(torch.tensor([last]), name="join.results")
    assert torch.all(lasts == lasts[0])
    assert 0 <= last < s
    if s > 1:
        assert last != early

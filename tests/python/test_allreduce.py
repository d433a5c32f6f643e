"""Allreduce through tutti.torch (docs/cases.md 1-7, 17-20)."""

import pytest
import torch

import tutti.torch as hvd

ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.bfloat16, torch.float32, torch.float64, torch.bool]
NUMERIC = [d for d in ALL_DTYPES if d is not torch.bool]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SHAPES = [(5,), (3, 4), (2, 3, 4)]


def r_s():
    return hvd.rank(), hvd.size()


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shape", SHAPES)
def test_sum_of_x_plus_rank(dtype, shape):
    r, s = r_s()
    x = 3
    out = hvd.allreduce(torch.full(shape, x + r, dtype=dtype), op=hvd.Sum)
    assert out.dtype == dtype and tuple(out.shape) == shape
    assert torch.equal(out, torch.full(shape, s * x + s * (s - 1) // 2, dtype=dtype))


# torch 2.3+: uint16/uint32/uint64 (torch has few kernels for them; tutti reduces them itself).
WIDE_UNSIGNED = [getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)]


@pytest.mark.skipif(not WIDE_UNSIGNED, reason="this torch has no uint16/uint32/uint64")
@pytest.mark.parametrize("dtype", WIDE_UNSIGNED, ids=str)
def test_wide_unsigned_sum_min_max_wrap_as_unsigned(dtype):
    r, s = r_s()
    bits = dtype.itemsize * 8
    top = (1 << bits) - 1
    # Rank k holds [k + 1, top - k, top]: the last two sums wrap modulo 2**bits.
    values = [[k + 1, top - k, top] for k in range(s)]
    t = _unsigned_tensor(values[r], dtype)
    got = hvd.allreduce(t, op=hvd.Sum, name="wide_sum.%s" % dtype)
    assert got.dtype == dtype
    assert _unsigned_values(got) == [sum(col) % (1 << bits) for col in zip(*values)]
    got = hvd.allreduce(t, op=hvd.Min, name="wide_min.%s" % dtype)
    assert _unsigned_values(got) == [min(col) for col in zip(*values)]
    got = hvd.allreduce(t, op=hvd.Max, name="wide_max.%s" % dtype)
    assert _unsigned_values(got) == [max(col) for col in zip(*values)]


def _unsigned_tensor(values, dtype):
    """A uint16/32/64 tensor of Python ints (made through int64's bits)."""
    signed = [v - (1 << 64) if v >= (1 << 63) else v for v in values]
    t = torch.tensor(signed, dtype=torch.int64)
    return t.view(dtype) if dtype.itemsize == 8 else t.to(dtype)


def _unsigned_values(t):
    """A uint16/32/64 tensor's values as Python ints."""
    if t.dtype.itemsize == 8:
        return [v % (1 << 64) for v in t.view(torch.int64).tolist()]
    return t.to(torch.int64).tolist()


@pytest.mark.parametrize("dtype", FLOATS)
def test_average_is_the_mean(dtype):
    r, s = r_s()
    out = hvd.allreduce(torch.full((7,), 2.0 * r, dtype=dtype))  # op=Average by default
    assert torch.equal(out, torch.full((7,), float(s - 1), dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.float16,
                                   torch.bfloat16, torch.float32, torch.float64])
def test_min_max(dtype):
    r, s = r_s()
    t = torch.tensor([r, -r, 10 - r], dtype=dtype)
    assert torch.equal(hvd.allreduce(t, op=hvd.Min), torch.tensor([0, -(s - 1), 11 - s], dtype=dtype))
    assert torch.equal(hvd.allreduce(t, op=hvd.Max), torch.tensor([s - 1, 0, 10], dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64, torch.float32,
                                   torch.float64])
def test_product_of_small_integers_is_exact(dtype):
    r, s = r_s()
    expected = 1
    for k in range(1, s + 1):
        expected *= k
    out = hvd.allreduce(torch.full((4,), r + 1, dtype=dtype), op=hvd.Product)
    assert torch.equal(out, torch.full((4,), expected, dtype=dtype))


def test_bool_ops_are_logical():
    r, s = r_s()
    t = torch.tensor([r == 0, True, False])
    assert torch.equal(hvd.allreduce(t, op=hvd.Sum), torch.tensor([True, True, False]))
    assert torch.equal(hvd.allreduce(t, op=hvd.Max), torch.tensor([True, True, False]))
    assert torch.equal(hvd.allreduce(t, op=hvd.Min), torch.tensor([s == 1, True, False]))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
def test_prescale_postscale(dtype):
    r, s = r_s()
    x = torch.full((6,), 2 * (r + 1), dtype=dtype)
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=1.5, postscale_factor=2.0)
    # 2 * sum(1.5 * 2 (r + 1)) = 6 * s (s + 1) / 2
    assert torch.equal(out, torch.full((6,), 3 * s * (s + 1), dtype=dtype))


def test_scaled_average_float():
    r, s = r_s()
    out = hvd.allreduce(torch.full((3,), float(r + 1)), op=hvd.Average, prescale_factor=4.0,
                        postscale_factor=0.5)
    assert torch.allclose(out, torch.full((3,), 2.0 * (s + 1) / 2), rtol=1e-6)


def test_in_place_gives_the_same_result():
    r, s = r_s()
    t = torch.full((4, 5), float(r + 1))
    result = hvd.allreduce_(t, op=hvd.Sum)
    assert result is t
    assert torch.equal(t, torch.full((4, 5), s * (s + 1) / 2))


def test_non_contiguous_inputs():
    r, s = r_s()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + r
    view = base.t()  # non-contiguous
    assert not view.is_contiguous()
    expected = (torch.arange(12, dtype=torch.float32).reshape(3, 4) * s + s * (s - 1) / 2).t()
    assert torch.equal(hvd.allreduce(view, op=hvd.Sum), expected)
    hvd.allreduce_(view, op=hvd.Sum)
    assert torch.equal(view, expected)
    assert torch.equal(base, expected.t())


def test_zero_elements_and_scalars():
    r, s = r_s()
    empty = hvd.allreduce(torch.zeros(0, 3), op=hvd.Sum)
    assert tuple(empty.shape) == (0, 3)
    scalar = hvd.allreduce(torch.tensor(float(r)), op=hvd.Sum)
    assert scalar.dim() == 0 and scalar.item() == s * (s - 1) / 2


def test_fifty_async_tensors_fused():
    r, s = r_s()
    tensors = [torch.full((i + 1, (i % 5) + 1), float(r + i)) for i in range(50)]
    handles, not_done = [], []
    for i, t in enumerate(tensors):
        handles.append(hvd.allreduce_async(t, name="fifty.%d" % i, op=hvd.Sum))
        not_done.append(not hvd.poll(handles[-1]))  # right after enqueue: still negotiating
    outs = [hvd.synchronize(h) for h in handles]
    if s > 1:
        assert any(not_done), "every op was done right after enqueue: not asynchronous?"
    for i, out in enumerate(outs):
        assert torch.equal(out, torch.full((i + 1, (i % 5) + 1), float(s * i + s * (s - 1) / 2)))


def test_grouped_allreduce_equals_allreducing_each():
    r, _ = r_s()
    tensors = [torch.full((3,), float(r)), torch.full((2, 4), float(2 * r + 1)),
               torch.arange(6, dtype=torch.float64).reshape(3, 2) * (r + 1)]
    grouped = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="group")
    each = [hvd.allreduce(t, op=hvd.Sum, name="each.%d" % i) for i, t in enumerate(tensors)]
    for g, e in zip(grouped, each):
        assert torch.equal(g, e)
    in_place = [t.clone() for t in tensors]
    hvd.grouped_allreduce_(in_place, op=hvd.Sum, name="group_")
    for g, e in zip(in_place, each):
        assert torch.equal(g, e)


def test_name_reused_after_completion():
    r, s = r_s()
    for step in range(3):
        out = hvd.allreduce(torch.full((2,), float(r + step)), op=hvd.Sum, name="reused")
        assert torch.equal(out, torch.full((2,), float(s * step + s * (s - 1) / 2)))


def test_duplicate_name_in_flight_fails_at_once():
    r, s = r_s()
    # "dup.r" cannot complete before the barrier: only rank r has submitted it.
    own = hvd.allreduce_async(torch.ones(3), name="dup.%d" % r, op=hvd.Sum)
    if s > 1:
        with pytest.raises(hvd.DuplicateNameError) as info:
            hvd.allreduce_async(torch.ones(3), name="dup.%d" % r, op=hvd.Sum)
        assert "dup.%d" % r in str(info.value)
    hvd.barrier()
    others = [hvd.allreduce_async(torch.ones(3), name="dup.%d" % k, op=hvd.Sum)
              for k in range(s) if k != r]
    for h in [own] + others:
        assert torch.equal(hvd.synchronize(h), torch.full((3,), float(s)))
    # later ops, and the same names again, work
    assert torch.equal(hvd.allreduce(torch.ones(2), name="dup.0", op=hvd.Sum),
                       torch.full((2,), float(s)))


def test_autograd_through_allreduce():
    r, s = r_s()
    x = torch.full((3,), float(r + 1), requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum, name="autograd")
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), float(s)))


def test_fp16_compression():
    r, s = r_s()
    out = hvd.allreduce(torch.full((5,), float(r) + 0.5), op=hvd.Sum,
                        compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.full((5,), s * 0.5 + s * (s - 1) / 2))


# ---- cross-rank mismatches: an error on every rank, never a hang --------------

needs_peers = pytest.mark.skipif("hvd.size() < 2", reason="needs at least 2 ranks")


@needs_peers
def test_shape_mismatch_names_tensor_and_shapes():
    r, s = r_s()
    with pytest.raises(hvd.MismatchError) as info:
        hvd.allreduce(torch.zeros(17 + r), name="mismatched_shape", op=hvd.Sum)
    message = str(info.value)
    assert "mismatched_shape" in message
    assert "17" in message and "18" in message


@needs_peers
def test_dtype_mismatch_names_dtypes():
    r, _ = r_s()
    dtype = torch.int32 if r % 2 == 0 else torch.float32
    with pytest.raises(hvd.MismatchError) as info:
        hvd.allreduce(torch.zeros(4, dtype=dtype), name="mismatched_dtype", op=hvd.Sum)
    assert "int32" in str(info.value) and "float32" in str(info.value)


@needs_peers
def test_op_mismatch():
    r, _ = r_s()
    with pytest.raises(hvd.MismatchError) as info:
        hvd.allreduce(torch.zeros(4), name="mismatched_op", op=hvd.Sum if r == 0 else hvd.Max)
    assert "mismatched_op" in str(info.value)


@needs_peers
def test_scale_mismatch():
    r, _ = r_s()
    with pytest.raises(hvd.MismatchError):
        hvd.allreduce(torch.zeros(4), name="mismatched_scale", op=hvd.Sum,
                      prescale_factor=1.0 + r)


def test_errors_are_tutti_errors_and_later_ops_work():
    r, s = r_s()
    with pytest.raises(hvd.TuttiError):
        hvd.allreduce(torch.zeros(3, dtype=torch.complex64))
    with pytest.raises(hvd.InvalidArgumentError):
        hvd.allreduce(torch.zeros(3), op="bogus")
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after_errors"),
                       torch.full((1,), float(s)))

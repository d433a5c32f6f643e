"""Scale factors and integer averages as Horovod's (horovod ScaleBuffer):
prescale_factor on each rank's input before the sum, postscale_factor after
it; integer tensors scaled in float64 and truncated toward zero; an integer
Average is the sum divided by size(), truncated; float16 scales in float32.

References are computed here with Python integers, fractions and torch on one
process, never through tutti.
"""

import math
from fractions import Fraction

import pytest
import torch

import tutti.torch as hvd

INT_TYPES = [torch.int8, torch.int16, torch.int32, torch.int64]


def r_s():
    return hvd.rank(), hvd.size()


def trunc_div(total, size):
    """total / size truncated toward zero (Fraction: exact)."""
    return int(Fraction(total, size))


# Rank 0 holds BASE, every rank q adds q * STEP: sums (over np 1, 2, 3) that are
# odd, negative, and not multiples of 2 or 3.
BASE = [75, -75, 77, -77, 1, -1, 0, 50]
STEP = [0, 0, 1, -1, 0, 0, 1, -2]


def contribution(rank):
    return [(b if rank == 0 else 0) + rank * c for b, c in zip(BASE, STEP)]


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_average_is_the_sum_divided_by_size_truncated(dtype):
    r, s = r_s()
    out = hvd.allreduce(torch.tensor(contribution(r), dtype=dtype), name="avg.int.%s" % dtype,
                        op=hvd.Average)
    sums = [sum(contribution(q)[i] for q in range(s)) for i in range(len(BASE))]
    assert out.dtype == dtype
    assert out.tolist() == [trunc_div(x, s) for x in sums]
    if s == 2:
        assert out.tolist()[:2] == [37, -37]  # 75 / 2 and -75 / 2, not 38 / -38


def test_integer_average_with_the_deprecated_average_flag():
    r, s = r_s()
    out = hvd.allreduce(torch.tensor(contribution(r), dtype=torch.int32), average=True,
                        name="avg.int.flag")
    sums = [sum(contribution(q)[i] for q in range(s)) for i in range(len(BASE))]
    assert out.tolist() == [trunc_div(x, s) for x in sums]


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_prescale_truncates_on_each_rank_before_the_sum(dtype):
    r, s = r_s()
    x = torch.tensor([3, -3, 5, -5, 7, 1], dtype=dtype)
    out = hvd.allreduce(x, name="pre.int.%s" % dtype, op=hvd.Sum, prescale_factor=0.5)
    # each rank: trunc(0.5 * x) = [1, -1, 2, -2, 3, 0], then the sum
    # (scaling the sum instead would give trunc(1.5 s) for 3: 3 at np 2, 4 at np 3)
    assert out.tolist() == [s * v for v in [1, -1, 2, -2, 3, 0]]


def test_integer_postscale_truncates_after_the_sum():
    r, s = r_s()
    x = torch.tensor([r + 1, -(r + 1), 10 * r + 3], dtype=torch.int32)
    out = hvd.allreduce(x, name="post.int", op=hvd.Sum, postscale_factor=0.4)
    sums = [sum(q + 1 for q in range(s)), -sum(q + 1 for q in range(s)),
            sum(10 * q + 3 for q in range(s))]
    assert out.tolist() == [math.trunc(v * 0.4) for v in sums]


def test_integer_prescale_postscale_and_average_together():
    r, s = r_s()
    x = torch.tensor([7 + r, -7 - r, 1], dtype=torch.int64)
    out = hvd.allreduce(x, name="prepost.int", op=hvd.Average, prescale_factor=0.5,
                        postscale_factor=3.0)
    per_rank = [[math.trunc(0.5 * v) for v in [7 + q, -7 - q, 1]] for q in range(s)]
    sums = [sum(p[i] for p in per_rank) for i in range(3)]
    assert out.tolist() == [int(Fraction(3 * v, s)) for v in sums]


def test_float16_on_cpu_scales_in_float32():
    r, s = r_s()
    x = torch.tensor([1000.0, -3.0, 0.1, 2049.0], dtype=torch.float16)
    pre = 1.0 / 3.0
    out = hvd.allreduce(x, name="pre.f16", op=hvd.Sum, prescale_factor=pre)
    # Reference: torch, on this process: each rank's x * float32(1/3) rounded to
    # float16, then the sum, accumulated in float32 and rounded to float16 at
    # each step (tutti's 16-bit reduction).
    mine = (x.float() * torch.tensor(pre, dtype=torch.float32)).half()
    acc = mine
    for _ in range(s - 1):
        acc = (acc.float() + mine.float()).half()
    assert out.dtype == torch.float16
    assert torch.equal(out, acc)
    avg = hvd.allreduce(torch.full((3,), 3000.0, dtype=torch.float16), name="avg.f16")
    assert torch.equal(avg, torch.full((3,), 3000.0, dtype=torch.float16))


def test_float_prescale_and_postscale():
    r, s = r_s()
    x = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64) * (r + 1)
    out = hvd.allreduce(x, name="prepost.f64", op=hvd.Sum, prescale_factor=0.5,
                        postscale_factor=4.0)
    total = sum(q + 1 for q in range(s))
    assert torch.equal(out, torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64) * 2.0 * total)


def _my_rows(d0, r, s):
    rows = [d0 // s + (1 if q < d0 % s else 0) for q in range(s)]
    return sum(rows[:r]), rows[r]


def test_reducescatter_integer_scales_and_average():
    r, s = r_s()
    d0 = 2 * s + 1
    base = [[(i * 3 + j) * (1 if (i + j) % 2 else -1) for j in range(3)] for i in range(d0)]
    x = torch.tensor([[v + r for v in row] for row in base], dtype=torch.int32)
    offset, mine = _my_rows(d0, r, s)
    out = hvd.reducescatter(x, name="rs.int.scaled", op=hvd.Sum, prescale_factor=0.5,
                            postscale_factor=3.0)
    expected = [[math.trunc(3.0 * sum(math.trunc(0.5 * (v + q)) for q in range(s))) for v in row]
                for row in base[offset:offset + mine]]
    assert out.tolist() == expected
    avg = hvd.reducescatter(x, name="rs.int.avg", op=hvd.Average)
    expected = [[trunc_div(sum(v + q for q in range(s)), s) for v in row]
                for row in base[offset:offset + mine]]
    assert avg.tolist() == expected


def test_reducescatter_float_average_with_postscale():
    r, s = r_s()
    d0 = 3 * s
    x = torch.arange(d0 * 2, dtype=torch.float32).reshape(d0, 2) * (r + 1)
    offset, mine = _my_rows(d0, r, s)
    out = hvd.reducescatter(x, name="rs.f32.avg", op=hvd.Average, postscale_factor=2.0)
    total = sum(q + 1 for q in range(s))
    ref = torch.arange(d0 * 2, dtype=torch.float64).reshape(d0, 2) * total * 2.0 / s
    assert torch.allclose(out.double(), ref[offset:offset + mine], rtol=1e-6, atol=0)

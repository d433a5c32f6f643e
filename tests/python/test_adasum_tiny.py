"""hvd.Adasum on vectors of tiny magnitude, as Horovod 0.28.1: a vector
counts as zero only when its squared norm (accumulated in float64) is below
sqrt(DBL_MIN) ~ 1.49e-154 (horovod/common/ops/adasum/adasum.h), so tiny
gradients are combined, not summed. Magnitudes np.finfo(dtype).tiny and 1e-20
(float16 cannot hold 1e-20). The expected values are written out here, not
computed by an Adasum reference:

- parallel: every rank holds the same vector v of two elements; Adasum of
  equal vectors is v (coefficients exactly 1/2). float64's tiny (2^-1022)
  squares to 0 in float64, so that vector is a zero vector and every level
  adds: size() * v, Horovod's result too.
- orthogonal: rank r holds m at element r only; every dot product is 0: the
  sum, m at elements 0 .. size()-1.

Run at 2, 4 and 8 ranks under tcp and under mpirun (tests/python/horovod.cmake).
"""

import numpy as np
import pytest
import torch

import tutti.torch as hvd

CASES = [
    (torch.float16, float(np.finfo(np.float16).tiny)),
    (torch.float32, float(np.finfo(np.float32).tiny)),
    (torch.float32, 1e-20),
    (torch.float64, float(np.finfo(np.float64).tiny)),
    (torch.float64, 1e-20),
]
IDS = ["%s-%g" % (str(d).split(".")[1], m) for d, m in CASES]


def power_of_two():
    s = hvd.size()
    return s & (s - 1) == 0


@pytest.mark.parametrize("dtype,magnitude", CASES, ids=IDS)
def test_parallel_tiny_vectors_are_combined(dtype, magnitude):
    if not power_of_two():
        pytest.skip("Adasum needs a power-of-two number of ranks")
    m = torch.tensor(magnitude, dtype=dtype)
    assert float(m) > 0, "the magnitude must be representable"
    v = torch.full((2,), float(m), dtype=dtype)
    squares_underflow = float(m) ** 2 == 0.0
    want = v * hvd.size() if squares_underflow else v
    got = hvd.allreduce(v, op=hvd.Adasum, name="tiny.par.%s.%g" % (dtype, magnitude))
    assert got.dtype == dtype
    assert torch.equal(got, want), (got.tolist(), want.tolist())
    if hvd.size() > 1 and not squares_underflow:
        assert not torch.equal(got, v * hvd.size()), "summed as zero vectors"
    inplace = v.clone()
    hvd.allreduce_(inplace, op=hvd.Adasum, name="tiny.par_.%s.%g" % (dtype, magnitude))
    assert torch.equal(inplace, want)


@pytest.mark.parametrize("dtype,magnitude", CASES, ids=IDS)
def test_orthogonal_tiny_vectors_add(dtype, magnitude):
    if not power_of_two():
        pytest.skip("Adasum needs a power-of-two number of ranks")
    s, r = hvd.size(), hvd.rank()
    m = float(torch.tensor(magnitude, dtype=dtype))
    x = torch.zeros(s + 1, dtype=dtype)
    x[r] = m
    want = torch.tensor([m] * s + [0.0], dtype=dtype)
    got = hvd.allreduce(x, op=hvd.Adasum, name="tiny.ortho.%s.%g" % (dtype, magnitude))
    assert torch.equal(got, want), (got.tolist(), want.tolist())


def test_scaled_parallel_float32_tiny_matches_the_formula():
    """Rank r holds (r + 1) * t, t = float32's tiny: the pairwise formula in
    float64, a' = (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b, for every pair up
    the tree (every vector is a multiple of t, so only the factors matter)."""
    if not power_of_two():
        pytest.skip("Adasum needs a power-of-two number of ranks")
    s, r = hvd.size(), hvd.rank()
    t = float(np.finfo(np.float32).tiny)
    level = [float(q + 1) for q in range(s)]
    while len(level) > 1:
        # For scalars a, b (times the same vector): a.b/|a|^2 = b/a.
        level = [(1 - b / (2 * a)) * a + (1 - a / (2 * b)) * b
                 for a, b in zip(level[0::2], level[1::2])]
    x = torch.full((3,), (r + 1) * t, dtype=torch.float32)
    got = hvd.allreduce(x, op=hvd.Adasum, name="tiny.scaled")
    want = torch.full((3,), level[0] * t, dtype=torch.float64)
    assert torch.allclose(got.double(), want, rtol=1e-6, atol=0), (got.tolist(), level[0] * t)

"""hvd.Adasum (allreduce, allreduce_async, in place, grouped) and
DistributedOptimizer(op=Adasum) against Adasum evaluated here in float64
without tutti: the ranks' vectors combined pairwise, (0,1), (2,3), ...,
then those results, with a' = (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b. On a
number of ranks that is not a power of two every rank raises
NotImplementedError, as Horovod."""

import copy
import math
import sys

import pytest
import torch
import torch.nn.functional as F

import tutti.torch as hvd
from test_optimizer import ROWS_PER_RANK, flat, global_batch, make_model

TOL = {torch.float16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}
# Horovod's zero test (horovod/common/ops/adasum/adasum.h): |v|^2 < sqrt(DBL_MIN).
ZERO_NORM2 = math.sqrt(sys.float_info.min)


def power_of_two():
    s = hvd.size()
    return s & (s - 1) == 0


def combine(a, b):
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1 - dot / (2 * aa) if aa >= ZERO_NORM2 else 1.0
    cb = 1 - dot / (2 * bb) if bb >= ZERO_NORM2 else 1.0
    return ca * a + cb * b


def reference(per_rank):
    """Adasum of the list of rank tensors (float64, flattened)."""
    level = [t.double().reshape(-1) for t in per_rank]
    while len(level) > 1:
        level = [combine(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def rank_tensor(r, k, shape, dtype):
    g = torch.Generator().manual_seed(100 * k + r)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)


def expected_for(k, shape, dtype, prescale=1.0, postscale=1.0):
    ins = [prescale * rank_tensor(r, k, shape, dtype).double() for r in range(hvd.size())]
    return (postscale * reference(ins)).reshape(shape)


def close(got, want, dtype):
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    diff = (got.double() - want).abs()
    return diff.numel() == 0 or float(diff.max()) <= TOL[dtype] * scale


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_allreduce_matches_the_reference(dtype):
    r = hvd.rank()
    x = rank_tensor(r, 1, (13, 7), dtype)
    if not power_of_two():
        with pytest.raises(NotImplementedError, match="non-power of 2"):
            hvd.allreduce(x, op=hvd.Adasum, name="adasum.np2")
        return
    out = hvd.allreduce(x, op=hvd.Adasum, name="adasum.plain.%s" % dtype)
    assert out.dtype == dtype and out.shape == x.shape
    assert close(out, expected_for(1, (13, 7), dtype), dtype)
    scaled = hvd.allreduce(x, op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0)
    assert close(scaled, expected_for(1, (13, 7), dtype, 0.5, 3.0), dtype)
    inplace = x.clone()
    hvd.synchronize(hvd.allreduce_async_(inplace, op=hvd.Adasum))
    assert close(inplace, expected_for(1, (13, 7), dtype), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_grouped_and_async_combine_each_tensor_alone(dtype):
    if not power_of_two():
        with pytest.raises(NotImplementedError):
            hvd.grouped_allreduce([torch.zeros(3, dtype=dtype)], op=hvd.Adasum)
        return
    r = hvd.rank()
    shapes = [(5,), (40, 3), (1,), (17,), (2, 2, 9)]
    tensors = [rank_tensor(r, k, s, dtype) for k, s in enumerate(shapes)]
    grouped = hvd.grouped_allreduce(tensors, op=hvd.Adasum)
    handles = [hvd.allreduce_async(t, op=hvd.Adasum, name="adasum.async.%s.%d" % (dtype, k))
               for k, t in enumerate(tensors)]
    separate = [hvd.synchronize(h) for h in handles]
    for k, s in enumerate(shapes):
        want = expected_for(k, s, dtype)
        assert close(grouped[k], want, dtype), k
        assert close(separate[k], want, dtype), k


def test_orthogonal_gradients_add_and_equal_ones_stay():
    if not power_of_two():
        return
    r, s = hvd.rank(), hvd.size()
    ortho = torch.zeros(3 * s)
    ortho[3 * r:3 * r + 3] = torch.tensor([1.0, -2.0, 0.5]) * (r + 1)
    want = torch.cat([torch.tensor([1.0, -2.0, 0.5]) * (q + 1) for q in range(s)])
    assert torch.equal(hvd.allreduce(ortho, op=hvd.Adasum), want)
    same = rank_tensor(0, 9, (50,), torch.float32)
    assert torch.equal(hvd.allreduce(same, op=hvd.Adasum), same)


def test_errors_as_horovod():
    x = torch.arange(4 * hvd.size(), dtype=torch.float32)
    # Reducescatter has no Adasum: a RuntimeError (Horovod's test expects one).
    with pytest.raises(hvd.InvalidArgumentError, match="Adasum"):
        hvd.reducescatter(x, op=hvd.Adasum)
    if not power_of_two():
        return
    for dtype in (torch.int32, torch.int64, torch.uint8, torch.bool, torch.bfloat16):
        with pytest.raises(hvd.InvalidArgumentError, match="float16, float32 and float64"):
            hvd.allreduce(torch.ones(4, dtype=dtype), op=hvd.Adasum)


def sgd(m):
    return torch.optim.SGD(m.parameters(), lr=0.1)


def test_distributed_optimizer_adasum_combines_the_steps():
    """Each rank's SGD step is -lr * its gradient; the parameters move by the
    Adasum of those steps (Horovod's _DistributedAdasumOptimizer)."""
    r, s = hvd.rank(), hvd.size()
    model = make_model(seed=3)
    start = copy.deepcopy(model)
    if not power_of_two():
        opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                       op=hvd.Adasum)
        with pytest.raises(NotImplementedError):
            opt.step()  # the first delta's Adasum, before anything is enqueued
        return
    # The reference: every rank's step on its own rows, computed here.
    steps = []
    x, y = global_batch(0, s)
    for q in range(s):
        m = copy.deepcopy(start)
        rows = slice(ROWS_PER_RANK * q, ROWS_PER_RANK * (q + 1))
        F.mse_loss(m(x[rows]), y[rows]).backward()
        steps.append([-0.1 * p.grad.double() for p in m.parameters()])
    want = [p.detach().double() + reference([st[i] for st in steps]).reshape(p.shape)
            for i, p in enumerate(start.parameters())]
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum)
    opt.zero_grad()
    rows = slice(ROWS_PER_RANK * r, ROWS_PER_RANK * (r + 1))
    F.mse_loss(model(x[rows]), y[rows]).backward()
    opt.step()
    for p, w in zip(model.parameters(), want):
        assert torch.allclose(p.detach().double(), w, rtol=1e-5, atol=1e-6)
    everyone = hvd.allgather(flat(model).unsqueeze(0), name="adasum.opt.check")
    assert torch.equal(everyone, flat(model).unsqueeze(0).expand(s, -1))


def test_distributed_optimizer_adasum_trains_with_adam_and_fp16():
    if not power_of_two():
        return
    r, s = hvd.rank(), hvd.size()
    model = make_model(seed=4)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   compression=hvd.Compression.fp16,
                                   backward_passes_per_step=2)
    losses = []
    for step in range(6):
        x, y = global_batch(step % 2, s)
        opt.zero_grad()
        for k in range(2):
            rows = slice(ROWS_PER_RANK * r + 2 * k, ROWS_PER_RANK * r + 2 * k + 2)
            loss = F.mse_loss(model(x[rows]), y[rows])
            loss.backward()
        losses.append(float(loss))
        opt.step()
    everyone = hvd.allgather(flat(model).unsqueeze(0), name="adasum.adam.check")
    assert torch.equal(everyone, flat(model).unsqueeze(0).expand(s, -1))
    if s > 1:
        with pytest.raises(AssertionError, match="not supported"):
            with opt.skip_synchronize():
                pass
        with pytest.raises(ValueError, match="does not apply to Adasum"):
            hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                     op=hvd.Adasum, compression=hvd.Compression.topk(0.1))


def test_adasum_over_even_and_odd_process_sets():
    """Adasum within a set combines its members' tensors only (rank order
    within the set), like Adasum over a world of the set's size."""
    size = hvd.size()
    if size < 4 or size % 4:
        pytest.skip("needs two sets of a power-of-two size: 4 or 8 ranks")
    rank = hvd.rank()
    even = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odd = hvd.add_process_set([r for r in range(size) if r % 2 == 1])
    try:
        ps = even if rank % 2 == 0 else odd
        shape = (3, 5)
        out = hvd.allreduce(rank_tensor(rank, 1, shape, torch.float64), op=hvd.Adasum,
                            name="adasum.sets", process_set=ps)
        expected = reference([rank_tensor(m, 1, shape, torch.float64) for m in ps.ranks])
        assert torch.allclose(out.reshape(-1), expected, rtol=1e-12, atol=1e-12)
    finally:
        hvd.remove_process_set(odd)
        hvd.remove_process_set(even)

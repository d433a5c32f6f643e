"""tutti.torch.mpi_ops's Horovod autograd Functions, called as Horovod's
(horovod/torch/mpi_ops.py 0.28.1: HorovodAllreduce.apply(tensor, average,
name, op, prescale_factor, postscale_factor, process_set), ...): forward
values and gradients against values computed here, with Horovod's gradient
conventions (docs/horovod.md)."""

import torch

import tutti.torch as hvd
from tutti.torch import mpi_ops
from tutti.torch.mpi_ops import (
    HorovodAllgather,
    HorovodAllreduce,
    HorovodAlltoall,
    HorovodBroadcast,
    HorovodGroupedAllgather,
    HorovodGroupedAllreduce,
    HorovodGroupedReducescatter,
    HorovodReducescatter,
)

GLOBAL = mpi_ops.global_process_set


def leaf(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def test_allreduce_and_grouped_allreduce():
    r, s = hvd.rank(), hvd.size()
    x = leaf([1.0 * (r + 1), 2.0])
    y = HorovodAllreduce.apply(x, None, "hmo.ar", hvd.Sum, 2.0, 0.5, GLOBAL)
    total = s * (s + 1) / 2
    assert torch.equal(y.detach(), torch.tensor([total, 2.0 * s], dtype=torch.float64))
    y.sum().backward()  # the same allreduce of the gradient: Sum, scaled by 2 * 0.5
    assert torch.equal(x.grad, torch.full((2,), float(s), dtype=torch.float64))
    a, b = leaf([float(r)]), leaf([1.0, 1.0])
    ga, gb = HorovodGroupedAllreduce.apply(None, "hmo.gar", hvd.Average, 1.0, 1.0, GLOBAL, a, b)
    assert torch.allclose(ga.detach(), torch.tensor([(s - 1) / 2.0], dtype=torch.float64))
    assert torch.equal(gb.detach(), torch.ones(2, dtype=torch.float64))
    (ga.sum() + 3 * gb.sum()).backward()
    assert torch.allclose(a.grad, torch.ones(1, dtype=torch.float64))
    assert torch.allclose(b.grad, torch.full((2,), 3.0, dtype=torch.float64))


def test_allgather_and_grouped_allgather():
    r, s = hvd.rank(), hvd.size()
    x = leaf([[float(r)]] * (r + 1))  # rank r: r + 1 rows of r
    y = HorovodAllgather.apply(x, "hmo.ag", GLOBAL)
    want = [[float(q)] for q in range(s) for _ in range(q + 1)]
    assert torch.equal(y.detach(), torch.tensor(want, dtype=torch.float64))
    weights = torch.arange(len(want), dtype=torch.float64).unsqueeze(1)
    (y * weights).sum().backward()  # Average-allreduce of the gradient, then my rows
    offset = r * (r + 1) // 2
    assert torch.equal(x.grad, weights[offset:offset + r + 1])
    (g,) = HorovodGroupedAllgather.apply("hmo.gag", GLOBAL, leaf([float(r)]))
    assert torch.equal(g.detach(), torch.arange(s, dtype=torch.float64))


def test_broadcast_alltoall_reducescatter():
    r, s = hvd.rank(), hvd.size()
    x = leaf([float(r), 1.0])
    y = HorovodBroadcast.apply(x, s - 1, "hmo.bc", GLOBAL)
    assert torch.equal(y.detach(), torch.tensor([s - 1.0, 1.0], dtype=torch.float64))
    y.sum().backward()  # Average-allreduce on the root, zeros elsewhere
    want = torch.ones(2, dtype=torch.float64) if r == s - 1 else torch.zeros(2, dtype=torch.float64)
    assert torch.equal(x.grad, want)
    t = leaf([float(100 * r + q) for q in range(s)])
    out, received = HorovodAlltoall.apply(t, None, "hmo.a2a", GLOBAL)
    assert torch.equal(out.detach(), torch.tensor([100.0 * q + r for q in range(s)],
                                                  dtype=torch.float64))
    assert received.tolist() == [1] * s
    (out * torch.arange(s, dtype=torch.float64)).sum().backward()  # sent back
    assert torch.equal(t.grad, torch.full((s,), float(r), dtype=torch.float64))
    z = leaf([1.0] * (2 * s))
    part = HorovodReducescatter.apply(z, "hmo.rs", hvd.Sum, GLOBAL, 1.0, 1.0)
    assert torch.equal(part.detach(), torch.full((2,), float(s), dtype=torch.float64))
    part.sum().backward()  # allgather of the gradient, times size() for Sum
    assert torch.equal(z.grad, torch.full((2 * s,), float(s), dtype=torch.float64))
    (gp,) = HorovodGroupedReducescatter.apply("hmo.grs", hvd.Average, GLOBAL, 1.0, 1.0,
                                              leaf([2.0] * s))
    assert torch.equal(gp.detach(), torch.full((1,), 2.0, dtype=torch.float64))

"""Horovod 0.28.1's PyTorch test cases, continued (see test_horovod_suite.py):
optimizer state broadcast, DistributedOptimizer, join, barrier, object
collectives, compression, sparse and elastic state objects.
"""

import inspect
import io
import itertools
import time
import warnings
from collections.abc import Iterable

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tutti.torch as hvd

N, D_IN, H, D_OUT = 64, 100, 10, 10

# Every torch optimizer but L-BFGS and SparseAdam, sorted by name, as Horovod;
# also not torch 2.x's Muon, which takes 2-D parameters only (the model has biases).
_EXCLUDED = (torch.optim.LBFGS, torch.optim.SparseAdam, getattr(torch.optim, "Muon", None))
OPTIMIZERS = sorted(
    ((c.__name__, c) for c in torch.optim.Optimizer.__subclasses__()
     if c.__module__.startswith("torch.optim") and c not in _EXCLUDED), key=lambda t: t[0])
OPTIONS = [dict(lr=0.2, momentum=0.9, weight_decay=0.1, centered=True), dict(lr=0.2)]


def _need_two():
    if hvd.size() == 1:
        pytest.skip("needs more than one rank (skipped on every rank)")


def _accepted(cls, options):
    params = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in options.items() if k in params}


def _data(seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    return torch.randn(N, D_IN).requires_grad_(), torch.randn(N, D_OUT).requires_grad_()


def _model_and_opt(cls, options, **kwargs):
    model = nn.Sequential(nn.Linear(D_IN, H), nn.ReLU(), nn.Linear(H, D_OUT))
    opt = cls(model.parameters(), **_accepted(cls, options))
    return model, hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                           **kwargs)


def _train_step(model, opt, x, y):
    loss = F.mse_loss(model(x), y, reduction="sum")
    opt.zero_grad()
    loss.backward()
    opt.step()


def _opt_values(opt):
    sd = opt.state_dict()
    return [(k, v.clone() if torch.is_tensor(v) else v)
            for group in sd["param_groups"] for pid in group["params"] if pid in sd["state"]
            for k, v in sorted(sd["state"][pid].items())]


@pytest.mark.parametrize("name,cls,options",
                         [(n, c, o) for (n, c), o in itertools.product(OPTIMIZERS, OPTIONS)])
def test_broadcast_state(name, cls, options):
    x, y = _data()
    model, opt = _model_and_opt(cls, options)
    _train_step(model, opt, x, y)
    params = [(k, v.clone()) for k, v in sorted(model.state_dict().items())]
    for k, v in params:
        hvd.broadcast_(v, root_rank=0, name="hs.bs.p." + k)
    expected = []
    for k, v in _opt_values(opt):
        if torch.is_tensor(v):
            hvd.broadcast_(v, root_rank=0, name="hs.bs.o.%s.%d" % (k, len(expected)))
        else:
            v = hvd.broadcast_object(v, name="hs.bs.obj.%s.%d" % (k, len(expected)))
        expected.append((k, v))
    checkpoint = io.BytesIO()
    if hvd.rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, checkpoint)
    model, opt = _model_and_opt(cls, options)
    if hvd.rank() == 0:
        checkpoint.seek(0)
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for (k, v), (k2, v2) in zip(params, sorted(model.state_dict().items())):
        assert k == k2 and type(v) == type(v2) and (v == v2).all()
    n_state = hvd.broadcast_object(len(opt.state_dict()["state"]), name="hs.bs.len")
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert len(opt.state_dict()["state"]) == n_state
    after = _opt_values(opt)
    assert len(after) == len(expected)
    for (k, v), (k2, v2) in zip(expected, after):
        assert k == k2 and type(v) == type(v2), (k, type(v), type(v2))
        assert (v == v2).all() if torch.is_tensor(v) else v == v2


@pytest.mark.parametrize("name,cls", OPTIMIZERS)
def test_broadcast_state_options(name, cls):
    x, y = _data()
    p0 = dict(lr=0.1, momentum=0.8, weight_decay=0.2, nesterov=True,
              betas=(0.9, 0.999), etas=(0.8, 2.4), step_sizes=(1e-5, 100))
    p1 = dict(lr=0.2, momentum=0.9, weight_decay=0.1, nesterov=False,
              betas=(0.8, 0.9), etas=(0.25, 1.75), step_sizes=(1e-7, 5))
    model, opt = _model_and_opt(cls, p0 if hvd.rank() == 0 else p1)
    _train_step(model, opt, x, y)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for k, want in _accepted(cls, p0).items():
        got = opt.param_groups[0][k]
        pairs = zip(got, want) if isinstance(want, Iterable) else [(got, want)]
        for g, w in pairs:
            assert type(g) == type(w), (k, g, w)
            assert abs(g - w) <= 1e-5
    _train_step(model, opt, x, y)  # the broadcast options still work in ops


def test_broadcast_state_no_grad():
    class NoGrad(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Parameter(torch.tensor([1, 3]).int(), requires_grad=False)
            self.b = nn.Parameter(torch.rand(4))

    model = NoGrad()
    opt = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                          nesterov=True)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grad = opt.param_groups[0]["params"][1].grad
    assert opt.param_groups[0]["params"][0].grad is None
    if grad is not None:
        assert torch.equal(grad, hvd.broadcast(grad, root_rank=0, name="hs.bsng.grad"))


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(D_IN, H), nn.Linear(H, D_OUT), \
            nn.Linear(D_OUT, D_OUT)

    def forward(self, x):
        x1 = self.fc2(F.relu(self.fc1(x)))
        return x1, self.fc3(F.relu(x1))


@pytest.mark.parametrize("name,cls,options",
                         [(n, c, o) for (n, c), o in itertools.product(OPTIMIZERS, OPTIONS)])
def test_force_allreduce_unused_parameters(name, cls, options):
    """Rank 0 leaves fc3 without gradients; step() still allreduces them all."""
    _need_two()
    x, y = _data(hvd.rank())
    model = _TwoHeads()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(cls(model.parameters(), **_accepted(cls, options)),
                                   named_parameters=model.named_parameters())
    out1, out2 = model(x)
    loss = F.mse_loss(out1 if hvd.rank() == 0 else out2, y, reduction="sum")
    opt.zero_grad()
    loss.backward()
    opt.step()
    for name_, p in model.named_parameters():
        gathered = hvd.allgather(p.data.unsqueeze(0), name="hs.force." + name_)
        assert all(torch.allclose(g, gathered[0]) for g in gathered)


def test_duplicate_and_missing_names():
    net1, net2 = nn.Conv2d(1, 1, 1), nn.Conv2d(1, 1, 1)
    opt = torch.optim.SGD(itertools.chain(net1.parameters(), net2.parameters()), lr=0.1)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(opt, named_parameters=itertools.chain(
            net1.named_parameters(), net2.named_parameters()))
    model = nn.Sequential(nn.Conv2d(1, 100, 1), nn.Conv2d(100, 1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(opt, named_parameters=list(model.named_parameters())[0:1])


def test_no_named_parameters():
    model = nn.Sequential(nn.Conv2d(1, 10, 1), nn.Conv2d(10, 1, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    loss = model(torch.rand([1, 1, 50, 50])).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    model = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[1].parameters()}], lr=0.001))
    names = opt._parameter_names
    assert len(names) == len(set(names.values()))
    every = hvd.allgather_object(set(names.values()), name="hs.nonamed")
    assert len(every) == hvd.size() and all(n == every[0] for n in every)


def test_dynamic_requires_grad():
    _need_two()
    gen, disc = nn.Conv2d(1, 10, 1), nn.Conv2d(10, 1, 1)
    inp = torch.rand([1, 1, 20, 20])
    gen_opt = hvd.DistributedOptimizer(torch.optim.SGD(gen.parameters(), lr=0.1),
                                       named_parameters=gen.named_parameters())
    disc_opt = hvd.DistributedOptimizer(torch.optim.SGD(disc.parameters(), lr=0.1),
                                        named_parameters=disc.named_parameters())
    for step in range(6):
        train_gen = step % 2 == 0
        for p in gen.parameters():
            p.requires_grad_(train_gen)
        for p in disc.parameters():
            p.requires_grad_(not train_gen)
        gen_opt.zero_grad()
        disc_opt.zero_grad()
        disc(gen(inp)).sum().backward()
        for net, trained in ((gen, train_gen), (disc, not train_gen)):
            for p in net.parameters():
                assert trained == (p.grad is not None and p.grad.max().is_nonzero())
        (gen_opt if train_gen else disc_opt).step()


def _linear_opt(weight=None, **kwargs):
    model = nn.Linear(1, 1)
    if weight is not None:
        model.weight = nn.Parameter(torch.zeros(1, 1) + weight)
        model.bias = nn.Parameter(torch.zeros(1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), **kwargs)
    return model, opt


def test_gradient_clipping_and_step_warning():
    _need_two()
    model, opt = _linear_opt(0.5)
    loss = F.mse_loss(model(torch.ones(1, 1)), torch.ones(1, 1))
    opt.zero_grad()
    loss.backward()
    opt.synchronize()
    prior = model.weight.grad.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    assert abs(prior) > abs(model.weight.grad.item())
    with opt.skip_synchronize():
        opt.step()
    model, opt = _linear_opt()
    loss = F.mse_loss(model(torch.zeros(1, 1)), torch.ones(1, 1))
    opt.zero_grad()
    loss.backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    assert len(caught) == 1
    assert "optimizer.step() called without" in str(caught[0].message)


def test_zero_grad_race_assertion():
    _need_two()  # Horovod registers no gradient hooks in a job of one
    model, opt = _linear_opt(0.5)
    F.mse_loss(model(torch.ones(1, 1)), torch.ones(1, 1)).backward()
    with pytest.raises(AssertionError):
        opt.zero_grad()
    opt.step()


def test_backward_passes_per_step_and_predivide():
    """Two backward passes accumulate before one averaged allreduce; a
    predivide factor changes nothing but the rounding."""
    results = []
    for kwargs in (dict(), dict(backward_passes_per_step=2), dict(gradient_predivide_factor=2.0)):
        model, opt = _linear_opt(0.5, **kwargs)
        opt.zero_grad()
        passes = kwargs.get("backward_passes_per_step", 1)
        for _ in range(passes):
            x = torch.ones(1, 1) * (hvd.rank() + 1)
            (model(x).sum() / passes).backward()
        opt.step()
        results.append(model.weight.grad.clone())
    mean_x = (hvd.size() + 1) / 2.0
    for grad in results:
        assert torch.allclose(grad, torch.tensor([[mean_x]]))
    if hvd.size() == 1:
        return  # no hooks, so no count of backward passes (as Horovod)
    model, opt = _linear_opt(0.5, backward_passes_per_step=1)
    model(torch.ones(1, 1)).sum().backward()
    with pytest.raises(AssertionError):
        model(torch.ones(1, 1)).sum().backward()
    opt.step()


# --------------------------------------------------------------------- join

def _check_join_return(ret, first):
    if hvd.size() > 1:
        assert ret != first, "hvd.join() returned the first rank to join"
    every = hvd.allgather_object(ret, name="hs.join.ret")
    assert every == [ret] * hvd.size()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
def test_join_allreduce(dtype):
    size, rank = hvd.size(), hvd.rank()
    wrong = []  # asserted after the loop, so that no peer is left in a join
    for dim, first, caching in itertools.product([1, 2, 3], range(size), [False, True]):
        torch.manual_seed(1234)
        a = torch.empty([5] * dim).random_(-100, 100).to(dtype)
        b = torch.empty([17] * dim).random_(-100, 100).to(dtype)

        def both():
            ha = hvd.allreduce_async(a, name="hs.join.a", op=hvd.Average)
            hb = hvd.allreduce_async(b, name="hs.join.b", op=hvd.Average)
            return hvd.synchronize(ha), hvd.synchronize(hb)

        if caching:
            both()
        if rank == first:
            ret = hvd.join()
        else:
            avg_a, avg_b = both()
            ret = hvd.join()
            for avg, t in ((avg_a, a), (avg_b, b)):
                want = t * (size - 1)
                want = want.div(size, rounding_mode="trunc") if dtype in (
                    torch.int32, torch.int64) else want / size
                # Horovod scales by 1/size, so beyond two ranks floats round.
                if not torch.allclose(avg, want, 0 if size <= 2 else 1e-6):
                    wrong.append((dim, first, caching))
        _check_join_return(ret, first)
    assert not wrong, "hvd.join with hvd.allreduce: wrong averages in %s" % wrong


@pytest.mark.parametrize("op", ["allgather", "broadcast"])
def test_join_then_allgather_or_broadcast_raises(op):
    _need_two()
    for first in range(hvd.size()):
        if hvd.rank() == first:
            ret = hvd.join(hvd.local_rank()) if op == "broadcast" else hvd.join()
        else:
            with pytest.raises(RuntimeError):
                if op == "allgather":
                    hvd.allgather(torch.zeros([17] * 3), name="hs.join.ag")
                else:
                    hvd.broadcast(torch.zeros([17] * 3), hvd.rank(), name="hs.join.bc")
            ret = hvd.join()
        _check_join_return(ret, first)


# ------------------------------------------------------------------ barrier

def test_global_barrier_waits_for_all():
    _need_two()
    hvd.barrier()  # start together (Horovod's test first allreduces until all are up)
    start = time.time()
    if hvd.rank() == 0:
        time.sleep(1.0)
    hvd.barrier()
    waited = time.time() - start
    hvd.barrier()
    assert waited >= 0.9, waited


def test_barrier_with_multiple_collectives():
    handles = [hvd.broadcast_async(torch.eye(3), root_rank=0, name="hs.bar.bc"),
               hvd.allgather_async(torch.eye(5), name="hs.bar.ag1"),
               hvd.allgather_async(torch.zeros([5, 5]), name="hs.bar.ag2")]
    reduced = hvd.allreduce_async(torch.eye(5), name="hs.bar.ar")
    hvd.barrier()
    assert torch.equal(hvd.synchronize(reduced), torch.eye(5))
    for h in handles:
        hvd.synchronize(h)


# ------------------------------------------------ objects, compression, sparse

def test_broadcast_and_allgather_object():
    expected = {"hello": 123, 0: [1, 2]}
    got = hvd.broadcast_object(expected if hvd.rank() == 0 else {}, root_rank=0)
    assert got == expected
    d = {"metric_val_1": hvd.rank()}
    if hvd.rank() == 1:
        d["metric_val_2"] = 42
    results = hvd.allgather_object(d)
    want = [{"metric_val_1": i} for i in range(hvd.size())]
    if hvd.size() > 1:
        want[1] = {"metric_val_1": 1, "metric_val_2": 42}
    assert results == want


def test_compression_fp16():
    compression = hvd.Compression.fp16
    for dtype in [torch.float32, torch.float64, torch.uint8, torch.int8, torch.int16,
                  torch.int32, torch.int64]:
        tensor = torch.ones([5] * 3, dtype=dtype)
        compressed, ctx = compression.compress(tensor)
        assert compressed.dtype == (torch.float16 if dtype.is_floating_point else dtype)
        restored = compression.decompress(compressed, ctx)
        assert restored.dtype == dtype
        assert torch.equal(restored, tensor)


def test_sparse_embeddings_and_async_sparse_allreduce():
    for sparse_as_dense in [False, True]:
        model = nn.Embedding(10, 3, sparse=True)
        if hvd.rank() == 0:
            inp = torch.LongTensor([[1, 2, 4, 5], [4, 3, 2, 9]])
        else:
            inp = torch.LongTensor([[1, 3, 4], [4, 7, 9]])
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(model.parameters()), lr=0.1),
                                       sparse_as_dense=sparse_as_dense)
        loss = model(inp).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.manual_seed(hvd.rank())
    dense = [torch.rand(d0, 10) for d0 in [17, 32, 81, 12, 15, 23, 22]]
    for t in dense:
        t[t < 0.8] = 0
    reduced = [hvd.allreduce(t, name="hs.sparse.ref%d" % i) for i, t in enumerate(dense)]
    handles = [hvd.sparse_allreduce_async(t.to_sparse(), op=hvd.Average, name="hs.sparse%d" % i)
               for i, t in enumerate(dense)]
    for want, handle in zip(reduced, handles):
        assert torch.allclose(want, handle().to_dense(), 1e-6)


# ------------------------------------------------------------ elastic state

def test_elastic_torch_state_commit_restore_sync():
    model, opt = _linear_opt(0.5)
    state = hvd.elastic.TorchState(model, opt, epoch=1, batch=2)
    state.commit()
    with torch.no_grad():
        model.weight.fill_(7.0)
    state.epoch, state.batch = 5, 6
    state.restore()
    assert model.weight.item() == 0.5 and (state.epoch, state.batch) == (1, 2)
    with torch.no_grad():
        model.weight.fill_(float(hvd.rank()))
    state.epoch = 10 + hvd.rank()
    state.sync()
    assert model.weight.item() == 0.0 and state.epoch == 10
    objs = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, step=hvd.rank(),
                                   name="r%d" % hvd.rank())
    objs.sync()
    assert (objs.step, objs.name) == (0, "r0")
    objs.step = 3
    objs.commit()
    objs.step = 4
    objs.restore()
    assert objs.step == 3

"""broadcast_optimizer_state as Horovod 0.28.1's (horovod/torch/functions.py):
a fresh optimizer is stepped once with zero gradients, so afterwards every
parameter that requires grad has a zero p.grad of its shape on every rank
(hvd.broadcast(p.grad) works) and the optimizer's state exists for it; then
root's state is broadcast. The model's forward uses only some of its
parameters (a buffer-like parameter that requires grad but never gets a
gradient); SGD with momentum and nesterov, and Adam; plain and wrapped in
DistributedOptimizer. Training afterwards matches single-process training on
the global batch, whose optimizer took the same zero step."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tutti.torch as hvd
from test_optimizer import ROWS_PER_RANK, global_batch


class PartlyUsed(nn.Module):
    """Linear(5, 7) -> tanh -> Linear(7, 3); `unused` (4 x 2) and the second
    head `spare` (7 -> 3) are parameters that forward never touches."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2, self.spare = nn.Linear(5, 7), nn.Linear(7, 3), nn.Linear(7, 3)
        self.unused = nn.Parameter(torch.randn(4, 2))
        self.frozen = nn.Parameter(torch.randn(3), requires_grad=False)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


OPTIMIZERS = [
    ("sgd_nesterov", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True)),
    ("adam", lambda ps: torch.optim.Adam(ps, lr=0.01)),
]


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def zero_step(model, opt):
    """Horovod's initialization, by hand: zero gradients, one step."""
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    opt.step()


def check_state_created(name, model, opt):
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert set(opt.state) == set(trainable), "state for %d of %d parameters" % (
        len(opt.state), len(trainable))
    for p in trainable:
        st = opt.state[p]
        if name == "adam":
            assert float(st["step"]) == 1
            assert torch.equal(st["exp_avg"], torch.zeros_like(p))
            assert torch.equal(st["exp_avg_sq"], torch.zeros_like(p))
        else:
            assert torch.equal(st["momentum_buffer"], torch.zeros_like(p))


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "distributed"])
@pytest.mark.parametrize("name,make_optimizer", OPTIMIZERS, ids=[n for n, _ in OPTIMIZERS])
def test_fresh_optimizer_gets_zero_grads_and_state(name, make_optimizer, wrapped):
    r = hvd.rank()
    model = PartlyUsed(seed=30 + r)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = flat(model)
    opt = make_optimizer(model.parameters())
    if wrapped:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    assert all(p.grad is None for p in model.parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            assert p.grad is None, pname  # as Horovod: only parameters that require grad
            continue
        assert p.grad is not None, "%s has no .grad after broadcast_optimizer_state" % pname
        assert p.grad.shape == p.shape and p.grad.dtype == p.dtype, pname
        assert torch.equal(p.grad, torch.zeros_like(p)), pname
        # Horovod users broadcast gradients right after (the failure of issue 26).
        got = hvd.broadcast(p.grad, 0, name="hos.grad.%s.%s.%d" % (name, pname, wrapped))
        assert torch.equal(got, torch.zeros_like(p))
    assert torch.equal(flat(model), before), "a zero step without weight decay moves nothing"
    check_state_created(name, model, opt)


@pytest.mark.parametrize("name,make_optimizer", OPTIMIZERS, ids=[n for n, _ in OPTIMIZERS])
def test_training_after_the_broadcast_matches_single_process(name, make_optimizer):
    r, s = hvd.rank(), hvd.size()
    model = PartlyUsed(seed=40 + r)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    reference = copy.deepcopy(model)
    ref_opt = make_optimizer(reference.parameters())
    zero_step(reference, ref_opt)
    opt = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = slice(ROWS_PER_RANK * r, ROWS_PER_RANK * (r + 1))
    for step in range(3):
        x, y = global_batch(step, s)
        ref_opt.zero_grad()
        F.mse_loss(reference(x), y).backward()
        ref_opt.step()
        opt.zero_grad()
        F.mse_loss(model(x[mine]), y[mine]).backward()
        opt.step()
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6), name
    everyone = hvd.allgather(flat(model).unsqueeze(0), name="hos.train.%s" % name)
    assert torch.equal(everyone, flat(model).unsqueeze(0).expand(s, -1))


def test_a_fresh_rank_takes_roots_state():
    """Root trained a step (state exists, no zero step there); the others are
    fresh: they take their zero step, then root's moments and step count."""
    r, s = hvd.rank(), hvd.size()
    model = PartlyUsed(seed=50)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if r == 0:
        x, y = global_batch(7, 1)
        F.mse_loss(model(x), y).backward()
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = torch.cat([torch.cat([st["exp_avg"].reshape(-1), st["step"].reshape(-1).float()])
                      for _, st in sorted((n, opt.state[p]) for n, p in
                                          model.named_parameters() if p in opt.state)])
    everyone = hvd.allgather(mine.unsqueeze(0), name="hos.fresh")
    assert torch.equal(everyone, mine.unsqueeze(0).expand(s, -1))
    assert len(opt.state) == 4  # fc1 and fc2: root's unused parameters have no state
    # The fresh ranks' zero step gave every trainable parameter a gradient;
    # root, which had state, took no step: its unused parameters have none.
    for name, p in model.named_parameters():
        if p.requires_grad and (r != 0 or name.startswith(("fc1", "fc2"))):
            assert p.grad is not None and p.grad.shape == p.shape, name
        elif p.requires_grad:
            assert p.grad is None, name


def test_sparse_embedding_of_model_gets_a_sparse_zero_gradient():
    emb = nn.Embedding(6, 3, sparse=True)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=emb)
    assert emb.weight.grad.is_sparse and torch.equal(emb.weight.grad.to_dense(),
                                                      torch.zeros(6, 3))

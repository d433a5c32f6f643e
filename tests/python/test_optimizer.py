"""DistributedOptimizer and the broadcast helpers: training on shards equals
single-process training on the concatenated batch."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tutti.torch as hvd

ROWS_PER_RANK = 4


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def global_batch(step, s):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(ROWS_PER_RANK * s, 5, generator=g)
    y = torch.randn(ROWS_PER_RANK * s, 3, generator=g)
    return x, y


def reference_training(model, steps, s, make_optimizer, loss_scale=1.0, zero_step=False):
    """Single-process training on the global batch. zero_step: first the step
    with zero gradients that broadcast_optimizer_state takes on a fresh
    optimizer (Horovod's state initialization)."""
    model = copy.deepcopy(model)
    opt = make_optimizer(model)
    if zero_step:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
    for step in range(steps):
        x, y = global_batch(step, s)
        opt.zero_grad()
        (F.mse_loss(model(x), y) * loss_scale).backward()
        opt.step()
    return model


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("name,make_optimizer", [
    ("sgd", lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)),
    ("adam", lambda m: torch.optim.Adam(m.parameters(), lr=0.01)),
])
def test_distributed_optimizer_matches_single_process(name, make_optimizer):
    r, s = hvd.rank(), hvd.size()
    model = make_model(seed=r)  # different per rank: broadcast_parameters fixes it
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    reference = reference_training(model, 5, s, make_optimizer, zero_step=True)
    opt = hvd.DistributedOptimizer(make_optimizer(model), named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for step in range(5):
        x, y = global_batch(step, s)
        mine = slice(ROWS_PER_RANK * r, ROWS_PER_RANK * (r + 1))
        opt.zero_grad()
        F.mse_loss(model(x[mine]), y[mine]).backward()
        opt.step()
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6), name
    everyone = hvd.allgather(flat(model).unsqueeze(0), name="opt.check." + name)
    assert torch.equal(everyone, flat(model).unsqueeze(0).expand(s, -1))


def test_backward_passes_per_step_accumulates_locally():
    r, s = hvd.rank(), hvd.size()
    model = make_model(seed=7)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.05)  # noqa: E731
    # Two local passes of half a shard each: the summed gradient is twice the
    # gradient of the shard's mean loss.
    reference = reference_training(model, 4, s, sgd, loss_scale=2.0)
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    half = ROWS_PER_RANK // 2
    for step in range(3):
        x, y = global_batch(step, s)
        opt.zero_grad()
        for k in range(2):
            rows = slice(ROWS_PER_RANK * r + k * half, ROWS_PER_RANK * r + (k + 1) * half)
            F.mse_loss(model(x[rows]), y[rows]).backward()
        opt.step()
    # Horovod's set_backward_passes_per_step: one pass (of the doubled loss) per step now.
    opt.set_backward_passes_per_step(1)
    x, y = global_batch(3, s)
    mine = slice(ROWS_PER_RANK * r, ROWS_PER_RANK * (r + 1))
    opt.zero_grad()
    (F.mse_loss(model(x[mine]), y[mine]) * 2.0).backward()
    opt.step()
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6)


def test_more_backward_passes_than_declared_raise_horovods_error():
    if hvd.size() == 1:
        pytest.skip("one rank: the hooks do not allreduce, so nothing counts the passes")
    model = make_model(seed=5)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(0, hvd.size())
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    with pytest.raises(AssertionError, match="more than backward_passes_per_step times"):
        F.mse_loss(model(x), y).backward()
    # The extra pass may have added into gradients whose allreduce was in
    # flight (as in Horovod, they are not to be used): only let the first
    # pass's allreduces finish, so that their names are free for later tests.
    opt.synchronize()
    opt.zero_grad()


def test_fp16_compression_close_to_single_process():
    r, s = hvd.rank(), hvd.size()
    model = make_model(seed=3)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.1)  # noqa: E731
    reference = reference_training(model, 3, s, sgd)
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16)
    for step in range(3):
        x, y = global_batch(step, s)
        mine = slice(ROWS_PER_RANK * r, ROWS_PER_RANK * (r + 1))
        opt.zero_grad()
        F.mse_loss(model(x[mine]), y[mine]).backward()
        opt.step()
    assert torch.allclose(flat(model), flat(reference), rtol=1e-2, atol=1e-3)


def test_broadcast_optimizer_state_and_options():
    r, s = hvd.rank(), hvd.size()
    model = make_model(seed=11 + r)
    opt = torch.optim.Adam(model.parameters(), lr=0.001 * (r + 1))
    x, y = global_batch(r, 1)
    F.mse_loss(model(x), y).backward()
    opt.step()  # rank-specific state
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.001)
    state = torch.cat([torch.cat([v.reshape(-1).double() for _, v in sorted(st.items())])
                       for st in opt.state.values()])
    everyone = hvd.allgather(state.unsqueeze(0), name="opt.state.check")
    assert torch.equal(everyone, state.unsqueeze(0).expand(s, -1))


def test_broadcast_parameters_accepts_named_parameters():
    r, s = hvd.rank(), hvd.size()
    model = make_model(seed=20 + r)
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=s - 1)
    reference = make_model(seed=20 + s - 1)
    assert torch.equal(flat(model), flat(reference))


def test_broadcast_object_from_every_root():
    r, s = hvd.rank(), hvd.size()
    for root in range(s):
        obj = {"rank": r, "payload": list(range(r * 10)), "text": "from %d" % r}
        got = hvd.broadcast_object(obj, root_rank=root, name="obj.%d" % root)
        assert got == {"rank": root, "payload": list(range(root * 10)), "text": "from %d" % root}


def test_allgather_object():
    r, s = hvd.rank(), hvd.size()
    got = hvd.allgather_object({"rank": r, "data": "x" * r})
    assert got == [{"rank": k, "data": "x" * k} for k in range(s)]


@pytest.mark.parametrize("specs", [("none", "topk:0.01"), ("topk:0.01", "topk:0.005"),
                                   ("fp16", "int8")])
def test_different_compression_on_ranks_is_a_mismatch_not_a_hang(specs):
    """Top-k changes which tensors the optimizer exchanges (updates, small
    tensors whole), so ranks that differ would wait for each other forever;
    the optimizer checks first and names every rank's choice. The check is
    made at construction (the one place every rank reaches in the same
    order: a check in the first gradient hook deadlocks two optimizers whose
    backward order differs by rank), so the construction is inside raises."""
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 3000), nn.Linear(3000, 2))
    spec = specs[0] if hvd.rank() == 0 else specs[1]
    with pytest.raises(hvd.MismatchError) as info:
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(),
                                       compression=spec)
        opt.zero_grad()
        model(torch.randn(4, 20)).sum().backward()
        opt.step()
    assert "rank 0 %s" % specs[0] in str(info.value)
    assert "rank 1 %s" % specs[1] in str(info.value)


def test_implicit_compress_updates_error_says_how_to_opt_out():
    model = nn.Linear(4, 2)
    with pytest.raises(ValueError, match="compress_updates=False"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters(),
                                 compression="topk:0.01", backward_passes_per_step=2)

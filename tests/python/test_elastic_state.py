"""tutti.elastic.ObjectState and tutti.torch.elastic.TorchState in a plain
(non-elastic) job: sync() makes the ranks equal to rank 0, commit() keeps a
snapshot, restore() returns to it; the DistributedOptimizer follows size changes.
Meaningful at 2 ranks or more; every test also passes as a job of one rank."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import tutti
import tutti.elastic
import tutti.torch as hvd
from tutti.torch import optimizer as optimizer_module


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))


def flat(model):
    return torch.cat([t.detach().reshape(-1) for t in model.state_dict().values()])


def local_step(model, optimizer, seed):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()


def same_on_every_rank(value):
    return all(v == value for v in hvd.allgather_object(value, name="test.same"))


def test_object_state_sync_commit_restore():
    r = hvd.rank()
    state = tutti.elastic.ObjectState(hvd.broadcast_object, hvd.rank, epoch=10 + r, items=[r])
    assert (state.epoch, state.items) == (10 + r, [r])
    state.sync()
    assert (state.epoch, state.items) == (10, [0])
    state.items.append(1)  # in place: the snapshot taken by sync() must not see it
    state.restore()
    assert (state.epoch, state.items) == (10, [0])
    state.epoch, state.items = 11, [0, 1]
    state.commit()
    state.items.append(2)
    state.epoch = 12
    state.restore()
    assert (state.epoch, state.items) == (11, [0, 1])
    state.restore()  # twice gives the same, not the object restored first
    assert state.items == [0, 1]


def test_torch_state_sync_makes_ranks_equal():
    r = hvd.rank()
    model = make_model(seed=r)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    local_step(model, optimizer, seed=r)  # optimizer state differs per rank too
    for _ in range(r):
        scheduler.step()
    state = hvd.elastic.TorchState(model, optimizer, scheduler=scheduler, epoch=r)
    state.sync()
    assert state.epoch == 0
    assert same_on_every_rank(flat(model).tolist())
    opt_state = optimizer.state_dict()
    assert same_on_every_rank([opt_state["param_groups"][0]["lr"]] + [
        opt_state["state"][i]["exp_avg"].reshape(-1).tolist() for i in sorted(opt_state["state"])])
    assert same_on_every_rank(scheduler.state_dict()["last_epoch"])
    # sync() snapshots what it received: restore() gives rank 0's values.
    local_step(model, optimizer, seed=100 + r)
    state.epoch = 5
    state.restore()
    assert state.epoch == 0 and same_on_every_rank(flat(model).tolist())


def test_torch_state_commit_restore_in_place():
    model = make_model(seed=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model, optimizer, step=0)
    state.sync()
    local_step(model, optimizer, seed=2)
    state.step = 1
    state.commit()
    committed_params = flat(model).clone()
    committed_opt = copy.deepcopy(optimizer.state_dict())
    params_before = [id(p) for p in model.parameters()]
    for s in range(3, 6):
        local_step(model, optimizer, seed=s)
    state.step = 4
    assert not torch.equal(flat(model), committed_params)
    state.restore()
    assert state.step == 1 and state.model is model and state.optimizer is optimizer
    assert [id(p) for p in model.parameters()] == params_before
    assert torch.equal(flat(model), committed_params)
    restored = optimizer.state_dict()
    for i, entry in committed_opt["state"].items():
        assert torch.equal(restored["state"][i]["momentum_buffer"], entry["momentum_buffer"])
    assert restored["param_groups"] == committed_opt["param_groups"]


def test_sampler_progress_is_gathered_at_commit():
    sampler = hvd.elastic.ElasticSampler(list(range(40)), shuffle=True, seed=4)
    state = hvd.elastic.TorchState(sampler=sampler, epoch=0)
    state.sync()
    assert (sampler.rank, sampler.num_replicas) == (hvd.rank(), hvd.size())
    sampler.record_batch(0, 3)
    expected = set().union(*hvd.allgather_object(set(sampler.get_indices(0, 3)), name="t.b0"))
    state.commit()
    assert sampler.processed_indices == expected and len(expected) == 3 * hvd.size()
    sampler.record_batch(1, 3)
    state.restore()
    assert sampler.processed_indices == expected
    assert len(sampler) == -(-(40 - len(expected)) // hvd.size())
    assert not set(sampler) & expected


def test_distributed_optimizer_follows_the_size(monkeypatch):
    # An elastic job that starts at size 1 and grows: hooks exist from the
    # start, do nothing at size 1, and average once the size is larger.
    real_size = hvd.size()
    monkeypatch.setattr(tutti.elastic, "enabled", lambda: True)
    monkeypatch.setattr(optimizer_module, "size", lambda: 1)
    model = make_model(seed=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    assert opt._grad_accs, "no gradient hooks in an elastic job at size 1"
    local_step(model, opt, seed=hvd.rank())  # local only
    assert not opt._handles
    monkeypatch.setattr(optimizer_module, "size", lambda: real_size)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    local_step(model, opt, seed=hvd.rank())  # averaged
    assert same_on_every_rank(flat(model).tolist())


def test_distributed_optimizer_drop_in_flight():
    # After a failure inside synchronize() the accumulation counts are spent;
    # without _drop_in_flight() the next backward would assert.
    model = make_model(seed=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for p in opt._allreduce_delay:
        opt._allreduce_delay[p] = 0
    opt._drop_in_flight()
    local_step(model, opt, seed=hvd.rank())
    assert same_on_every_rank(flat(model).tolist())


def test_torch_state_keeps_compression_residuals():
    """Top-k's error-feedback residuals are part of the commit: reset() (run
    after a join) puts the committed bytes back; bad bytes are an error."""
    model = make_model(3)
    state = hvd.elastic.TorchState(model=model, step=0)
    x = torch.arange(1000, dtype=torch.float32) + hvd.rank()
    hvd.allreduce(x, name="test.residuals.a", compression=tutti.Compression.topk(0.01))
    state.commit()
    committed = tutti.elastic.compression_residuals()
    assert committed[:4] == b"TRES"
    if hvd.size() > 1:
        # 990 of 1000 values stayed behind as residual: 4 bytes each, plus names.
        assert len(committed) > 4 * 990
    hvd.allreduce(x * 3, name="test.residuals.a", compression=tutti.Compression.topk(0.01))
    moved = tutti.elastic.compression_residuals()
    if hvd.size() > 1:
        assert moved != committed
    state.reset()  # what run() does after joining a new generation
    assert tutti.elastic.compression_residuals() == committed
    try:
        tutti.elastic.set_compression_residuals(b"TRES\x01\x00\x00\x00\x09")
    except tutti.InvalidArgumentError as e:
        assert "truncated header" in str(e)
    else:
        raise AssertionError("corrupt residual bytes were accepted")
    assert tutti.elastic.compression_residuals() == committed

"""hvd.elastic.run's loop with a fake reset (the elastic C API is not
called): a PeerLostError restores the last commit, a HostsUpdatedInterrupt
keeps the state; both reset, call the reset callbacks and sync again. The
state's collectives are real, so this runs under any job size."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tutti.elastic
import tutti.torch as hvd
import tutti.torch.elastic as torch_elastic

STEPS = 6


@pytest.fixture
def fake_elastic(monkeypatch):
    """An elastic job whose reset only records that it was called; the
    hosts-updated check says "no" unless a test sets `updates`."""
    events = {"resets": 0, "updates": []}

    def hosts_updated():
        return events["updates"].pop(0) if events["updates"] else False

    def reset():
        events["resets"] += 1

    monkeypatch.setattr(tutti.elastic, "enabled", lambda: True)
    monkeypatch.setattr(tutti.elastic, "hosts_updated", hosts_updated)
    monkeypatch.setattr(torch_elastic, "_reset", reset)
    return events


def make_state():
    torch.manual_seed(hvd.rank())  # differs per rank: the first sync fixes it
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    return hvd.elastic.TorchState(model, opt, step=0)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def step(state):
    g = torch.Generator().manual_seed(1000 * state.step + hvd.rank())
    x, y = torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)
    state.optimizer.zero_grad()
    F.mse_loss(state.model(x), y).backward()
    state.optimizer.step()
    state.step += 1


def spy(obj, name, log):
    original = getattr(obj, name)

    def wrapped(*args, **kwargs):
        log.append(name)
        return original(*args, **kwargs)

    setattr(obj, name, wrapped)


def train_with(state, interrupt_at, calls, commit_every=2, models=None):
    """STEPS steps, committing every commit_every; on the first call raises
    interrupt_at[1]() after step interrupt_at[0] (None: never). Appends the
    step at each call of the function to `calls`; `models` (a dict) gets the
    parameters at each call ("call <step>"), step ("step <step>") and commit
    ("commit <step>")."""
    models = {} if models is None else models

    @hvd.elastic.run
    def train(state):
        calls.append(state.step)
        models["call %d" % state.step] = flat(state.model).clone()
        while state.step < STEPS:
            step(state)
            models["step %d" % state.step] = flat(state.model).clone()
            if state.step % commit_every == 0:
                state.commit()
                models["commit %d" % state.step] = flat(state.model).clone()
            if interrupt_at and len(calls) == 1 and state.step == interrupt_at[0]:
                raise interrupt_at[1]()
        return flat(state.model)

    return train(state)


def reference():
    return train_with(make_state(), None, [])


def same_as_reference(result):
    # Equal up to the rounding of the allreduce: with 3 ranks or more the
    # order of the sums depends on how tensors were fused. A step applied
    # twice (no restore) differs by about lr * gradient, 1e-3 or more.
    return torch.allclose(result, reference(), rtol=1e-5, atol=1e-6)


def test_peer_lost_restores_the_last_commit(fake_elastic):
    state = make_state()
    log, calls = [], []
    for name in ("sync", "restore", "on_reset"):
        spy(state, name, log)
    spy(state.optimizer, "_drop_in_flight", log)
    state.register_reset_callbacks([lambda: log.append("callback %d" % state.step)])
    models = {}
    result = train_with(state, (3, lambda: hvd.PeerLostError("fake: rank 1 lost", 3)), calls,
                        models=models)
    # Lost after step 3: back to the commit of step 2, then steps 3..6 again.
    assert calls == [0, 2]
    assert torch.equal(models["call 2"], models["commit 2"])
    assert fake_elastic["resets"] == 1
    assert log == ["sync", "restore", "on_reset", "_drop_in_flight", "callback 2", "sync"]
    assert same_as_reference(result)


def test_hosts_updated_keeps_the_state(fake_elastic):
    state = make_state()
    log, calls = [], []
    for name in ("sync", "restore", "on_reset"):
        spy(state, name, log)
    fake_elastic["updates"] = [False, True]  # the commit of step 4 sees new hosts
    models = {}
    result = train_with(state, None, calls, models=models)
    assert calls == [0, 4]
    assert torch.equal(models["call 4"], models["step 4"])  # kept, not restored
    assert fake_elastic["resets"] == 1
    assert log == ["sync", "on_reset", "sync"]  # no restore
    assert same_as_reference(result)


def test_skip_sync_is_honoured(fake_elastic):
    synced = []
    state = tutti.elastic.ObjectState(lambda obj: synced.append(obj) or obj, hvd.rank, step=0)
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.step)
        if len(calls) == 1:
            raise hvd.HostsUpdatedInterrupt(skip_sync=True)
        return "done"

    assert train(state) == "done"
    assert calls == [0, 0] and len(synced) == 1 and fake_elastic["resets"] == 1


def test_peer_lost_without_an_elastic_job_propagates(monkeypatch):
    monkeypatch.setattr(tutti.elastic, "enabled", lambda: False)
    resets = []
    monkeypatch.setattr(torch_elastic, "_reset", lambda: resets.append(1))
    with pytest.raises(hvd.PeerLostError, match="fake"):
        train_with(make_state(), (1, lambda: hvd.PeerLostError("fake", 3)), [])
    assert not resets


def test_a_failing_reset_propagates(fake_elastic, monkeypatch):
    def reset():
        raise hvd.ShutdownError("the elastic driver gave up: fake", 4)

    monkeypatch.setattr(torch_elastic, "_reset", reset)
    with pytest.raises(hvd.ShutdownError, match="gave up"):
        train_with(make_state(), (1, lambda: hvd.PeerLostError("fake", 3)), [])


def test_other_errors_propagate_without_reset(fake_elastic):
    with pytest.raises(ZeroDivisionError):
        train_with(make_state(), (1, ZeroDivisionError), [])
    assert fake_elastic["resets"] == 0


def test_commit_raises_hosts_updated_after_saving(fake_elastic):
    state = tutti.elastic.ObjectState(hvd.broadcast_object, hvd.rank, step=0)
    state.step = 7
    fake_elastic["updates"] = [True]
    with pytest.raises(hvd.HostsUpdatedInterrupt) as info:
        state.commit()
    assert info.value.skip_sync is False
    state.step = 9
    state.restore()
    assert state.step == 7


def test_reset_joins_even_when_the_report_fails(monkeypatch):
    # leave() shut the runtime down but could not reach the driver's store:
    # join anyway (dying would get this survivor's host blacklisted).
    steps = []

    def leave():
        steps.append("leave")
        raise hvd.WaitTimeoutError("fake: the store did not answer", 5)

    monkeypatch.setattr(tutti.elastic, "leave", leave)
    monkeypatch.setattr(tutti.elastic, "join", lambda: steps.append("join"))
    with pytest.warns(UserWarning, match="joining the next one anyway"):
        torch_elastic._reset()
    assert steps == ["leave", "join"]

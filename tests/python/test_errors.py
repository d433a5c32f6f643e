"""The exception classes as Horovod users catch them: failed collectives are
hvd.HorovodInternalError (a RuntimeError), bad arguments and a duplicate name
in flight are ValueError; tutti's own classes and messages stay. Elastic
recovery (tutti.elastic.run_fn) still only restores on PeerLostError.
"""

import time

import pytest
import torch

import tutti
import tutti.elastic
import tutti.torch as hvd
from tutti.errors import error_for

FAILED_COLLECTIVE = [hvd.MismatchError, hvd.PeerLostError, hvd.StalledError, hvd.ShutdownError]


@pytest.mark.parametrize("cls", FAILED_COLLECTIVE)
def test_failed_collective_errors_are_horovod_internal_errors(cls):
    assert issubclass(cls, hvd.HorovodInternalError)
    assert issubclass(cls, hvd.TuttiError)
    err = error_for(cls.code, "what went wrong")  # as the binding builds them
    assert type(err) is cls
    assert isinstance(err, RuntimeError)
    assert str(err) == "what went wrong" and err.code == cls.code


def test_horovod_internal_error_is_a_runtime_error_of_its_own():
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert not issubclass(hvd.HorovodInternalError, hvd.TuttiError)
    for cls in (hvd.InvalidArgumentError, hvd.DuplicateNameError, hvd.WaitTimeoutError,
                hvd.NotInitializedError, hvd.TuttiIOError, hvd.InternalError):
        assert not issubclass(cls, hvd.HorovodInternalError), cls
    assert hvd.HorovodInternalError is not hvd.PeerLostError


def test_argument_errors_are_value_errors():
    for cls in (hvd.InvalidArgumentError, hvd.DuplicateNameError, hvd.NotInitializedError):
        assert issubclass(cls, ValueError) and issubclass(cls, hvd.TuttiError)
    with pytest.raises(ValueError):
        hvd.allreduce(torch.zeros(2), op=99, name="errors.badop")
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(torch.zeros(2), average=True, op=hvd.Sum, name="errors.both")


def _duplicate_error(name):
    """Enqueues `name` twice; returns what the second enqueue raised (None if
    it was accepted: the first had been taken for execution already)."""
    t = torch.ones(8)
    h = hvd.allreduce_async(t, name=name, op=hvd.Sum)
    try:
        h2 = hvd.allreduce_async(t, name=name, op=hvd.Sum)
    except ValueError as e:
        hvd.synchronize(h)
        return e
    hvd.synchronize(h)
    hvd.synchronize(h2)
    return None


def test_duplicate_name_in_flight_is_a_value_error():
    r, s = hvd.rank(), hvd.size()
    if s > 1:
        # Rank 0 first: its op cannot start before the others submit (0.3 s
        # later), so its second enqueue of the name is a duplicate for sure.
        if r != 0:
            time.sleep(0.3)
            assert torch.equal(hvd.allreduce(torch.ones(8), name="errors.dup", op=hvd.Sum),
                               torch.full((8,), float(s)))
            return
        error = _duplicate_error("errors.dup")
    else:
        # One rank: the op may be taken at once; one of a few tries meets it in flight.
        error = next(e for e in (_duplicate_error("errors.dup.%d" % i) for i in range(200)) if e)
    assert isinstance(error, hvd.DuplicateNameError)
    assert "already in flight" in str(error)


def test_a_mismatch_is_caught_as_horovod_internal_error():
    r, s = hvd.rank(), hvd.size()
    t = torch.zeros(4 + (r if s > 1 else 0))
    if s == 1:
        assert torch.equal(hvd.allreduce(t, name="errors.mismatch"), t)
        return
    try:
        hvd.allreduce(t, name="errors.mismatch")
    except hvd.HorovodInternalError as e:
        assert isinstance(e, hvd.MismatchError)
        assert "errors.mismatch" in str(e) and "shapes differ" in str(e)
    else:
        pytest.fail("a mismatched allreduce did not raise")


def test_importable_where_horovod_users_import_them():
    from tutti.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

    assert HorovodInternalError is hvd.HorovodInternalError is tutti.errors.HorovodInternalError
    assert HostsUpdatedInterrupt is hvd.HostsUpdatedInterrupt is hvd.elastic.HostsUpdatedInterrupt
    assert issubclass(HostsUpdatedInterrupt, RuntimeError)
    assert not issubclass(HostsUpdatedInterrupt, hvd.HorovodInternalError)
    assert HostsUpdatedInterrupt(skip_sync=True).skip_sync is True


class _State:
    def __init__(self):
        self.calls = []

    def sync(self):
        self.calls.append("sync")

    def restore(self):
        self.calls.append("restore")

    def on_reset(self):
        self.calls.append("on_reset")


def _flaky(error, state):
    """func for run_fn: raises `error` the first time, then returns 42."""
    def func(st):
        st.calls.append("func")
        if st.calls.count("func") == 1:
            raise error
        return 42
    return func


def test_elastic_recovers_from_peer_lost_only(monkeypatch):
    # Local (no collectives): run_fn with a fake state and reset, as if elastic.
    monkeypatch.setattr(tutti.elastic, "enabled", lambda: True)
    resets = []
    state = _State()
    run = tutti.elastic.run_fn(_flaky(hvd.PeerLostError("rank 1 closed its connection", 3),
                                      state), lambda: resets.append(1))
    assert run(state) == 42
    assert state.calls == ["sync", "func", "restore", "on_reset", "sync", "func"]
    assert resets == [1]
    for error in (hvd.MismatchError("shapes differ", 2), hvd.StalledError("stalled", 6),
                  hvd.ShutdownError("the elastic driver ended the job", 4)):
        state = _State()
        run = tutti.elastic.run_fn(_flaky(error, state), lambda: resets.append(2))
        with pytest.raises(hvd.HorovodInternalError) as info:
            run(state)
        assert info.value is error
        assert state.calls == ["sync", "func"]  # no restore, no reset
    assert resets == [1]

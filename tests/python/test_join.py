"""hvd.join() as Horovod's: it returns the last rank to join, the same on every
rank; until every rank joined, joined ranks take part in allreduces with
zeros and an Average divides by the whole size() (integers: the sum divided
by size(), truncated); a broadcast or allgather while some rank has joined
fails on the ranks that call it, with a HorovodInternalError (MismatchError),
also after earlier failed ops.

Every test is the same sequence on every rank for a given size(); the first
joiner is rank 0, the last one (when s > 1) the highest rank, held back.
"""

import time
from fractions import Fraction

import pytest
import torch

import tutti.torch as hvd


def r_s():
    return hvd.rank(), hvd.size()


def join_last_late(r, s, delay=0.3):
    """Joins; the highest rank waits `delay` first so that it joins last."""
    if s > 1 and r == s - 1:
        time.sleep(delay)
    return hvd.join()


def test_join_returns_the_last_rank_on_every_rank():
    r, s = r_s()
    last = join_last_late(r, s)
    assert last == s - 1
    # After every rank joined, collectives run normally again.
    lasts = hvd.allgather(torch.tensor([last], dtype=torch.int64), name="join.lasts")
    assert lasts.tolist() == [s - 1] * s


def test_joined_ranks_contribute_zeros_and_average_divides_by_size():
    r, s = r_s()
    if s > 1 and r == 0:
        last = hvd.join()
    else:
        ints = torch.tensor([74 + r, -(74 + r), 1, 3 * r], dtype=torch.int32)
        floats = torch.tensor([6.0, -1.5], dtype=torch.float64) * r
        got_int = hvd.allreduce(ints, name="join.avg.int", op=hvd.Average)
        got_sum = hvd.allreduce(ints, name="join.sum.int", op=hvd.Sum)
        got_float = hvd.allreduce(floats, name="join.avg.f64", op=hvd.Average)
        contributors = range(1, s) if s > 1 else range(1)
        sums = [sum(v) for v in zip(*[[74 + q, -(74 + q), 1, 3 * q] for q in contributors])]
        assert got_sum.tolist() == sums
        assert got_int.tolist() == [int(Fraction(v, s)) for v in sums]
        if s == 2:
            assert got_int.tolist() == [37, -37, 0, 1]  # 75/2, -75/2, 1/2, 3/2
        total = sum(contributors)
        assert got_float.tolist() == [6.0 * total / s, -1.5 * total / s]
        last = join_last_late(r, s)
    assert last == s - 1


def test_reducescatter_while_a_rank_joined_gets_its_zeros():
    r, s = r_s()
    if s > 1 and r == 0:
        hvd.join()
        return
    x = torch.arange(2 * s, dtype=torch.int64).unsqueeze(1) + 10 * r
    out = hvd.reducescatter(x, name="join.rs", op=hvd.Sum)
    contributors = list(range(1, s)) if s > 1 else [0]
    full = [sum(i + 10 * q for q in contributors) for i in range(2 * s)]
    assert out.flatten().tolist() == full[2 * r:2 * r + 2]
    join_last_late(r, s)


@pytest.mark.parametrize("op", ["broadcast", "allgather"])
def test_broadcast_or_allgather_while_a_rank_joined_raise_on_the_callers(op):
    r, s = r_s()
    # First a failed op on every rank (mismatched shapes when s > 1).
    bad = hvd.allreduce_async(torch.zeros(2 + (r if s > 1 else 0)), name="join.bad.%s" % op)
    if s > 1:
        with pytest.raises(hvd.MismatchError):
            hvd.synchronize(bad)
    else:
        hvd.synchronize(bad)
    if s > 1 and r == 0:
        last = hvd.join()
    elif s > 1:
        t = torch.full((3,), float(r))
        with pytest.raises(hvd.HorovodInternalError) as info:
            if op == "broadcast":
                hvd.broadcast(t, root_rank=1, name="join.bcast")
            else:
                hvd.allgather(t, name="join.gather")
        assert isinstance(info.value, hvd.MismatchError)
        assert "ranks [0] have joined" in str(info.value)
        # The runtime goes on: an allreduce still works (rank 0 gives zeros).
        got = hvd.allreduce(torch.ones(2), name="join.after.%s" % op, op=hvd.Sum)
        assert got.tolist() == [s - 1.0] * 2
        last = join_last_late(r, s)
    else:
        last = hvd.join()
    assert last == s - 1

"""broadcast_object and allgather_object: unnamed calls whose objects differ
in type between ranks (the default name must not come from the object), and
objects that cannot be pickled on one rank (every rank raises, naming that
rank and the pickling error; the next collective works)."""

import threading

import pytest
import torch

import tutti.torch as hvd


def r_s():
    return hvd.rank(), hvd.size()


def some_object(rank):
    """A different type for every rank (dict, None, list, int, ...)."""
    kinds = [{"rank": rank, "data": list(range(rank + 3))}, None, ["x" * rank, rank], rank * 7,
             ("tuple", rank)]
    return kinds[rank % len(kinds)]


def assert_collectives_work():
    r, s = r_s()
    assert torch.equal(hvd.allreduce(torch.full((2,), float(r + 1)), op=hvd.Sum),
                       torch.full((2,), float(s * (s + 1) // 2)))
    assert hvd.allgather_object(r + 100) == [q + 100 for q in range(s)]


def test_broadcast_object_from_root_with_none_elsewhere():
    # Horovod's pattern: the root passes the object, the others None.
    r, _ = r_s()
    obj = {"epoch": 3, "lr": [0.1, 0.01]} if r == 0 else None
    assert hvd.broadcast_object(obj, root_rank=0) == {"epoch": 3, "lr": [0.1, 0.01]}


def test_broadcast_object_from_every_root_with_a_different_type_per_rank():
    r, s = r_s()
    for root in range(s):
        assert hvd.broadcast_object(some_object(r), root_rank=root) == some_object(root)


def test_allgather_object_with_a_different_type_per_rank():
    r, s = r_s()
    assert hvd.allgather_object(some_object(r)) == [some_object(q) for q in range(s)]
    assert hvd.allgather_object(some_object(r), name="objects.named") == [
        some_object(q) for q in range(s)]


def test_broadcast_object_of_an_unpicklable_object_raises_on_every_rank():
    r, s = r_s()
    root = s - 1
    obj = threading.Lock() if r == root else "fine"
    with pytest.raises(hvd.InvalidArgumentError) as info:
        hvd.broadcast_object(obj, root_rank=root)
    message = str(info.value)
    assert "rank %d" % root in message
    assert "TypeError" in message and "lock" in message  # the pickling error
    if r == root:
        assert isinstance(info.value.__cause__, TypeError)
    assert_collectives_work()
    assert hvd.broadcast_object(obj if r != root else "root's", root_rank=root) == "root's"


def test_allgather_object_of_an_unpicklable_object_on_one_rank_raises_on_every_rank():
    r, s = r_s()
    bad = s - 1
    obj = (lambda: r) if r == bad else {"rank": r}
    with pytest.raises(hvd.InvalidArgumentError) as info:
        hvd.allgather_object(obj)
    message = str(info.value)
    assert "rank %d" % bad in message
    assert "pickle" in message and "lambda" in message  # the pickling error
    for q in range(s - 1):
        assert "rank %d " % q not in message
    assert_collectives_work()


def test_allgather_object_names_every_rank_that_failed():
    r, s = r_s()
    with pytest.raises(hvd.InvalidArgumentError) as info:
        hvd.allgather_object(threading.Lock() if r % 2 == 0 else r, name="objects.fail")
    for q in range(s):
        assert (("rank %d " % q) in str(info.value)) == (q % 2 == 0)
    assert_collectives_work()

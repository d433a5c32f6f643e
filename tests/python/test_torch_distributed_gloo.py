"""The same calls on a "tutti" group and on a gloo group of the same
processes, compared: all_gather_coalesced in torch's layout,
all_reduce_coalesced, sparse all_reduce, batch_isend_irecv, recv from any
source (the sender reported), the Work API (is_completed, is_success,
exception, wait(timeout), get_future) and monitored_barrier naming the rank
that did not arrive. Each also checks values computed by hand, so that both
backends being wrong alike fails too.

Runs on both torches (Debian's 1.13 and PyPI's 2.x) under tuttirun.
"""

import datetime
import time

import pytest
import torch
import torch.distributed as dist

from torch_dist_util import TORCH2, groups, needs_pair, rank_size


@pytest.fixture(scope="module", autouse=True)
def tutti_group():
    groups()


def on_both(fn):
    """fn(group) on the tutti group, then on the gloo group: (tutti's, gloo's)."""
    tutti, gloo = groups()
    return fn(tutti), fn(gloo)


def test_all_gather_coalesced_in_torchs_layout():
    """output_tensor_lists[r][k] holds rank r's input k (torch's docs, gloo)."""
    rank, size = rank_size()

    def run(group):
        ins = [torch.tensor([[rank, rank + 1], [rank + 2, rank + 3]]), torch.tensor([-rank]),
               torch.tensor([10 * rank, 7])]
        outs = [[torch.full_like(t, -1) for t in ins] for _ in range(size)]
        dist.all_gather_coalesced(outs, ins, group=group)
        return [[t.tolist() for t in per_rank] for per_rank in outs]

    tutti, gloo = on_both(run)
    assert tutti == gloo
    assert tutti == [[[[r, r + 1], [r + 2, r + 3]], [-r], [10 * r, 7]] for r in range(size)]


def test_all_gather_coalesced_names_a_wrong_layout():
    """One list per input holding one tensor per rank (the layout tutti read
    before) is refused, naming what is expected."""
    size = dist.get_world_size()
    ins = [torch.ones(2), torch.ones(3)]
    outs = [[torch.empty(2) for _ in range(size)], [torch.empty(3) for _ in range(size)]]
    with pytest.raises(RuntimeError, match="all_gather_coalesced (got 2 output lists; expected "
                                           "one per rank|output \\[0\\]\\[1\\] has 2 elements)"):
        dist.all_gather_coalesced(outs, ins)


@pytest.mark.parametrize("op", [dist.ReduceOp.SUM, dist.ReduceOp.MAX])
def test_all_reduce_coalesced(op):
    rank, size = rank_size()

    def run(group):
        ts = [torch.arange(4.0) * (rank + 1), torch.tensor([float(-rank)])]
        dist.all_reduce_coalesced(ts, op=op, group=group)
        return [t.tolist() for t in ts]

    tutti, gloo = on_both(run)
    assert tutti == gloo
    if op == dist.ReduceOp.SUM:
        want = [[i * size * (size + 1) / 2 for i in range(4)], [-sum(range(size))]]
    else:
        want = [[float(i * size) for i in range(4)], [0.0]]
    assert tutti == want


def test_sparse_all_reduce():
    """Every rank's indices, overlapping ones summed, coalesced in place as gloo's."""
    rank, size = rank_size()

    def run(group):
        indices = torch.tensor([[0, rank % 3, 4], [1, 2, rank]])
        values = torch.tensor([1.0, 10.0 * (rank + 1), 0.5])
        t = torch.sparse_coo_tensor(indices, values, (5, size + 3))
        dist.all_reduce(t, group=group)
        assert t.is_sparse and t.is_coalesced()
        return t._indices().tolist(), t._values().tolist()

    tutti, gloo = on_both(run)
    assert tutti == gloo
    want = torch.zeros(5, size + 3)
    for r in range(size):
        want[0, 1] += 1.0
        want[r % 3, 2] += 10.0 * (r + 1)
        want[4, r] += 0.5
    got = torch.sparse_coo_tensor(torch.tensor(tutti[0]), torch.tensor(tutti[1]), want.shape)
    assert torch.equal(got.to_dense(), want)


def test_sparse_all_reduce_names_the_ops_it_takes():
    t = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (2,))
    with pytest.raises(RuntimeError, match="sparse tensor takes SUM or AVG"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)


def work_state(work):
    """What torch's Work API answers after wait(timeout) returned, and
    exception() where it can be called: gloo's Work on torch 1.13 cannot
    convert its exception_ptr (TypeError, even after a success), tutti's
    answers None."""
    waited = work.wait(timeout=datetime.timedelta(seconds=60))
    try:
        exception = work.exception()
    except TypeError:
        exception = "unconvertible"
    return waited, work.is_completed(), work.is_success(), exception


def same_states(tutti, gloo):
    """tutti's answers equal gloo's, exception() None where gloo's cannot say."""
    tutti = [None if s == "unconvertible" else s for s in _flat(tutti)]
    gloo = [None if s == "unconvertible" else s for s in _flat(gloo)]
    return tutti == gloo


def _flat(value):
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    return [value]


def test_batch_isend_irecv_and_their_works():
    needs_pair()
    rank, size = rank_size()
    right, left = (rank + 1) % size, (rank - 1) % size

    def run(group):
        got = torch.zeros(3, dtype=torch.int64)
        ops = [dist.P2POp(dist.isend, torch.tensor([rank, 2 * rank, 7]), right, group),
               dist.P2POp(dist.irecv, got, left, group)]
        states = [work_state(w) for w in dist.batch_isend_irecv(ops)]
        return got.tolist(), states

    tutti, gloo = on_both(run)
    assert same_states(tutti, gloo), (tutti, gloo)
    assert tutti == ([left, 2 * left, 7], [(True, True, True, None)] * 2)


def test_work_api_of_collectives_and_p2p():
    """is_completed, is_success, exception after wait(timeout), and the
    future's value, of an async all_reduce, an isend and an irecv."""
    needs_pair()
    rank, size = rank_size()

    def run(group):
        t = torch.full((2,), float(rank + 1))
        work = dist.all_reduce(t, group=group, async_op=True)
        states = [work_state(work), work.get_future().wait()[0].tolist()]
        if rank < 2:
            peer = 1 - rank
            msg = torch.tensor([rank + 5.0]) if rank == 0 else torch.zeros(1)
            p2p = (dist.isend(msg, peer, group=group, tag=3) if rank == 0
                   else dist.irecv(msg, peer, group=group, tag=3))
            states += [work_state(p2p), msg.tolist()]
            if rank == 1:
                states.append(p2p._source_rank())
        return states

    tutti, gloo = on_both(run)
    assert same_states(tutti, gloo), (tutti, gloo)
    total = float(size * (size + 1) / 2)
    want = [(True, True, True, None), [total, total]]
    if rank < 2:
        want += [(True, True, True, None), [5.0]] + ([0] if rank == 1 else [])
    assert tutti == want


def test_wait_timeout_raises_and_the_op_goes_on():
    """Rank 0 waits 0.2 s for an all_reduce the others start 1 s later:
    wait(timeout) raises a RuntimeError saying it timed out, on both
    backends; the op then completes with the sum."""
    needs_pair()
    rank, size = rank_size()

    def run(group):
        t = torch.ones(2)
        if rank != 0:
            time.sleep(1.0)
        work = dist.all_reduce(t, group=group, async_op=True)
        timed_out = None
        if rank == 0:
            with pytest.raises(RuntimeError, match="timed out") as err:
                work.wait(timeout=datetime.timedelta(seconds=0.2))
            timed_out = type(err.value).__name__
        work.wait()
        return timed_out, work.is_completed(), t.tolist()

    tutti, gloo = on_both(run)
    assert tutti == gloo
    assert tutti == ("RuntimeError" if rank == 0 else None, True, [float(size)] * 2)


def test_work_of_a_failed_op():
    """A message whose sizes differ: both works complete unsuccessfully and
    exception() is tutti's MismatchError (gloo cannot be made to fail alike
    without breaking its group: tutti's answers only)."""
    needs_pair()
    rank, _ = rank_size()
    if rank < 2:
        t = torch.ones(4 if rank == 0 else 5)
        work = dist.isend(t, 1, tag=21) if rank == 0 else dist.irecv(t, 0, tag=21)
        with pytest.raises(RuntimeError, match="MismatchError"):
            work.wait()
        assert work.is_completed() and not work.is_success()
        assert "MismatchError" in str(work.exception())
        with pytest.raises(RuntimeError, match="MismatchError"):
            work.get_future().wait()
    dist.barrier()


def test_recv_from_any_source_reports_the_sender():
    """Rank 0 receives one message from every other rank without src (recv
    returns the sender, the value says who sent it), then, with rank 1
    sending three tagged messages, a recv from rank 1 and two from any
    source take them in order (irecv's work names the sender)."""
    needs_pair()
    rank, size = rank_size()

    def run(group):
        if rank != 0:
            dist.send(torch.tensor([rank * 11]), 0, group=group)
            if rank == 1:
                for i in range(3):
                    dist.send(torch.tensor([100 + i]), 0, group=group, tag=9)
            return None
        got = set()
        for _ in range(size - 1):
            t = torch.zeros(1, dtype=torch.int64)
            src = dist.recv(t, group=group)
            got.add((src, t.item()))
        ordered = []
        for src in (1, None, None):
            t = torch.zeros(1, dtype=torch.int64)
            work = dist.irecv(t, src, group=group, tag=9)
            work.wait()
            ordered.append((work._source_rank(), t.item()))
        return sorted(got), ordered

    tutti, gloo = on_both(run)
    assert tutti == gloo
    if rank == 0:
        assert tutti == ([(r, 11 * r) for r in range(1, size)],
                         [(1, 100), (1, 101), (1, 102)])


def test_recvs_from_any_source_posted_before_the_messages():
    """Rank 0 posts two irecvs without src before rank 1 sends (1 s later):
    neither is completed at first; they take rank 1's two messages in order."""
    needs_pair()
    rank, _ = rank_size()

    def run(group):
        if rank == 1:
            time.sleep(1.0)
            for v in (200, 201):
                dist.send(torch.tensor([v]), 0, group=group, tag=13)
        if rank != 0:
            return None
        got = [torch.zeros(1, dtype=torch.int64) for _ in range(2)]
        works = [dist.irecv(t, group=group, tag=13) for t in got]
        early = [w.is_completed() for w in works]
        for w in works:
            w.wait()
        return early, [w._source_rank() for w in works], [t.item() for t in got]

    tutti, gloo = on_both(run)
    assert tutti == gloo
    if rank == 0:
        assert tutti == ([False, False], [1, 1], [200, 201])


def _monitored(group, timeout):
    if TORCH2 or group is groups()[1]:
        dist.monitored_barrier(group=group, timeout=timeout, wait_all_ranks=True)
    else:  # torch 1.13's function admits gloo only; the group's method is ours
        group.monitored_barrier(timeout, True)


def test_monitored_barrier_names_the_rank_that_did_not_arrive():
    """The last rank comes late to both groups' monitored barriers: rank 0's
    error names it in gloo's words on both."""
    needs_pair()
    rank, size = rank_size()
    tutti = groups()[0]
    gloo = dist.new_group(backend="gloo")  # its own: a failed monitored barrier spoils a gloo group
    late = size - 1
    timeout = datetime.timedelta(seconds=1)
    if rank == late:
        time.sleep(2.5)
        timeout = datetime.timedelta(seconds=0.5)
    errors = []
    for group in (tutti, gloo):
        with pytest.raises(RuntimeError) as err:
            _monitored(group, timeout)
        errors.append(str(err.value))
    if rank == 0:
        sentence = "Ranks %d failed to pass monitoredBarrier in 1000 ms" % late
        assert sentence in errors[0] and sentence in errors[1], errors
    dist.barrier()
    _monitored(tutti, datetime.timedelta(seconds=30))

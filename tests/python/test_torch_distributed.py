"""torch.distributed on backend "tutti": every op against values computed by
hand from the ranks' inputs, async works and futures, errors.

Runs under tuttirun (the pytest job at np 1, 2, 3) and under torchrun
(tests/python/torch_distributed_jobs.py torchrun). Training equivalence (DDP,
hooks, ZeRO) is in test_torch_ddp.py.
"""

import functools
import operator

import pytest
import torch
import torch.distributed as dist
from tutti import process_sets

from torch_dist_util import groups, rank_size

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.uint8, torch.int8, torch.int32, torch.int64]


@pytest.fixture(scope="module", autouse=True)
def tutti_group():
    groups()


def values(r, dtype):
    """Rank r's input: small whole numbers, exact in every dtype."""
    if dtype == torch.bool:
        return torch.tensor([r % 2 == 0, True, False, r == 0])
    return torch.tensor([r + 1, 2 * (r + 1), 3, (r * 5) % 7], dtype=dtype)


def expected(op, dtype, size):
    rows = [values(r, dtype).double() for r in range(size)]
    if op == dist.ReduceOp.SUM:
        out = sum(rows)
    elif op == dist.ReduceOp.PRODUCT:
        out = functools.reduce(operator.mul, rows)
    elif op == dist.ReduceOp.MIN:
        out = functools.reduce(torch.minimum, rows)
    elif op == dist.ReduceOp.MAX:
        out = functools.reduce(torch.maximum, rows)
    else:  # AVG
        out = sum(rows) / size
    return out.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("op", ["SUM", "PRODUCT", "MIN", "MAX", "AVG"])
def test_all_reduce(op, dtype):
    rank, size = rank_size()
    if op == "AVG" and not dtype.is_floating_point:
        return  # integer AVG truncates per tutti's rule; tested in test_scaling.py
    reduce_op = getattr(dist.ReduceOp, op)
    t = values(rank, dtype)
    dist.all_reduce(t, op=reduce_op)
    assert torch.equal(t, expected(reduce_op, dtype, size)), (op, dtype, t)


@pytest.mark.parametrize("op", ["MIN", "MAX"])
def test_all_reduce_bool(op):
    rank, size = rank_size()
    t = values(rank, torch.bool)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    rows = torch.stack([values(r, torch.bool) for r in range(size)])
    want = rows.all(0) if op == "MIN" else rows.any(0)
    assert torch.equal(t, want)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool])
@pytest.mark.parametrize("op", ["BAND", "BOR", "BXOR"])
def test_all_reduce_bitwise(op, dtype):
    rank, size = rank_size()
    if dtype == torch.bool:
        def mine(r):
            return torch.tensor([r % 2 == 1, True, False, r == 0, r != 1])
    else:
        def mine(r):
            return torch.tensor([0b1011 << r, 255 - r, r, 6, 0], dtype=dtype)
    t = mine(rank)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    fn = {"BAND": operator.and_, "BOR": operator.or_, "BXOR": operator.xor}[op]
    want = functools.reduce(fn, [mine(r) for r in range(size)])
    assert torch.equal(t, want), (op, dtype, t, want)


def test_bitwise_on_float_is_an_error():
    with pytest.raises(RuntimeError, match="BAND, BOR and BXOR take integer or bool"):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
    # The group still works afterwards.
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [dist.get_world_size()] * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16, torch.bool])
def test_all_gather_and_base(dtype):
    rank, size = rank_size()
    outs = [torch.zeros(2, 2, dtype=dtype) for _ in range(size)]
    mine = values(rank, dtype).view(2, 2)
    dist.all_gather(outs, mine)
    for r in range(size):
        assert torch.equal(outs[r], values(r, dtype).view(2, 2))
    flat = torch.zeros(size * 2, 2, dtype=dtype)
    dist.all_gather_into_tensor(flat, mine)  # _allgather_base
    assert torch.equal(flat, torch.cat([values(r, dtype).view(2, 2) for r in range(size)]))


def test_all_gather_scalar_and_non_contiguous():
    rank, size = rank_size()
    outs = [torch.zeros((), dtype=torch.int32) for _ in range(size)]
    dist.all_gather(outs, torch.tensor(rank * 3, dtype=torch.int32))
    assert [o.item() for o in outs] == [3 * r for r in range(size)]
    base = torch.arange(6.0).view(2, 3) + rank
    outs = [torch.zeros(3, 2) for _ in range(size)]
    dist.all_gather(outs, base.t())
    for r in range(size):
        assert torch.equal(outs[r], (torch.arange(6.0).view(2, 3) + r).t())


@pytest.mark.parametrize("dtype", [torch.float64, torch.int8, torch.bfloat16])
def test_broadcast(dtype):
    rank, size = rank_size()
    for root in range(size):
        t = values(rank, dtype)
        dist.broadcast(t, root)
        assert torch.equal(t, values(root, dtype))


@pytest.mark.parametrize("op", ["SUM", "MAX", "BXOR"])
def test_reduce(op):
    rank, size = rank_size()
    root = size - 1
    t = values(rank, torch.int32)
    dist.reduce(t, root, op=getattr(dist.ReduceOp, op))
    if rank == root:
        fn = {"SUM": operator.add, "MAX": torch.maximum, "BXOR": operator.xor}[op]
        assert torch.equal(t, functools.reduce(fn, [values(r, torch.int32) for r in range(size)]))
    else:
        assert torch.equal(t, values(rank, torch.int32))  # unchanged


def test_gather_and_scatter():
    rank, size = rank_size()
    root = size // 2
    mine = torch.full((2, 3), float(rank))
    gathered = [torch.zeros(2, 3) for _ in range(size)] if rank == root else None
    dist.gather(mine, gathered, dst=root)
    if rank == root:
        for r in range(size):
            assert torch.equal(gathered[r], torch.full((2, 3), float(r)))
    out = torch.zeros(4, dtype=torch.int64)
    chunks = [torch.arange(4) * 10 + p for p in range(size)] if rank == root else None
    dist.scatter(out, chunks, src=root)
    assert torch.equal(out, torch.arange(4) * 10 + rank)


@pytest.mark.parametrize("op", ["SUM", "AVG", "MIN", "BOR"])
def test_reduce_scatter(op):
    rank, size = rank_size()
    dtype = torch.int64 if op == "BOR" else torch.float64

    def chunk(src, dst):  # what rank src contributes to rank dst
        return torch.tensor([src * 10 + dst + 1, src + 1, 1 << src], dtype=dtype)

    out = torch.zeros(3, dtype=dtype)
    dist.reduce_scatter(out, [chunk(rank, p) for p in range(size)], op=getattr(dist.ReduceOp, op))
    mine = [chunk(s, rank) for s in range(size)]
    want = {"SUM": lambda: sum(mine), "AVG": lambda: sum(mine) / size,
            "MIN": lambda: functools.reduce(torch.minimum, mine),
            "BOR": lambda: functools.reduce(operator.or_, mine)}[op]()
    torch.testing.assert_close(out, want, rtol=1e-15, atol=0)  # AVG: 1/size rounding
    base_out = torch.zeros(3, dtype=dtype)
    dist.reduce_scatter_tensor(base_out, torch.cat([chunk(rank, p) for p in range(size)]),
                               op=getattr(dist.ReduceOp, op))
    torch.testing.assert_close(base_out, want, rtol=1e-15, atol=0)


def test_all_to_all_single_even_and_split():
    rank, size = rank_size()
    inp = torch.arange(size * 2, dtype=torch.float32) + 100 * rank
    out = torch.zeros(size * 2)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * s
                      for s in range(size)])
    assert torch.equal(out, want)
    # Rank s sends s + p + 1 rows of [s, p, k] to rank p.
    send = [rank + p + 1 for p in range(size)]
    rows = torch.cat([torch.tensor([[rank, p, k] for k in range(n)], dtype=torch.int16)
                      for p, n in enumerate(send)])
    recv = [s + rank + 1 for s in range(size)]
    out = torch.zeros(sum(recv), 3, dtype=torch.int16)
    dist.all_to_all_single(out, rows, output_split_sizes=recv, input_split_sizes=send)
    want = torch.cat([torch.tensor([[s, rank, k] for k in range(n)], dtype=torch.int16)
                      for s, n in enumerate(recv)])
    assert torch.equal(out, want)


def test_all_to_all_lists():
    rank, size = rank_size()
    inputs = [torch.full((p + 1, 2), rank * 10 + p, dtype=torch.int32) for p in range(size)]
    outputs = [torch.zeros(rank + 1, 2, dtype=torch.int32) for _ in range(size)]
    dist.all_to_all(outputs, inputs)
    for s in range(size):
        assert torch.equal(outputs[s], torch.full((rank + 1, 2), s * 10 + rank, dtype=torch.int32))


def test_async_work_and_future():
    rank, size = rank_size()
    tensors = [torch.full((3,), float(rank + i)) for i in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    futures = [dist.all_reduce(torch.ones(2), async_op=True).get_future() for _ in range(2)]
    for w in works:
        assert w.wait()
    total = sum(range(size))
    for i, t in enumerate(tensors):
        assert t.tolist() == [float(total + i * size)] * 3
    for f in futures:
        assert f.wait()[0].tolist() == [float(size)] * 2
    # A callback that starts a collective and waits for it (as PowerSGD's do).
    chained = dist.all_reduce(torch.ones(1), async_op=True).get_future().then(
        lambda f: dist.all_reduce(f.value()[0] * 2, async_op=True).get_future().wait()[0])
    assert chained.wait().item() == 2.0 * size * size
    dist.barrier()
    dist.barrier(async_op=True).wait()


def _nested(t, depth):
    """A future of t's allreduce whose callback, depth times over, starts
    the allreduce of (result + 1) and blocks on it."""
    fut = dist.all_reduce(t, async_op=True).get_future()
    if depth == 0:
        return fut.then(lambda f: f.value()[0])
    return fut.then(lambda f: _nested(f.value()[0] + 1, depth - 1).wait())


def test_nested_blocking_callbacks_do_not_deadlock():
    # Four chains in flight at once, each callback blocking its completion
    # thread on a new collective: the completions of those must still be read
    # (by other threads). Chain i has i + 1 elements, so that its ops are named
    # apart from the other chains' (their threads race; names follow signatures).
    rank, size = rank_size()
    futures = [_nested(torch.full((i + 1,), float(rank + i)), 3) for i in range(4)]
    for i, fut in enumerate(futures):
        expect = sum(r + i for r in range(size))
        for _ in range(3):
            expect = size * (expect + 1)
        assert fut.wait().tolist() == [float(expect)] * (i + 1)


def test_object_collectives():
    rank, size = rank_size()
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(size)]
    lst = [rank, "x"] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [0, "x"]


def test_premul_sum_scales_before_summing():
    """PREMUL_SUM(f): sum of f * x_r (torch 2.x exposes f; torch 1.13 does not,
    and the op names what is missing on every rank)."""
    rank, size = rank_size()
    op = dist._make_nccl_premul_sum(0.5)
    t = torch.tensor([2.0 * (rank + 1), 4.0])
    if getattr(op, "factor", None) is None:
        with pytest.raises(RuntimeError, match="PREMUL_SUM whose factor"):
            dist.all_reduce(t, op=op)
        return
    dist.all_reduce(t, op=op)
    assert t.tolist() == [float(sum(r + 1 for r in range(size))), 2.0 * size]


def test_subgroups_run_over_tutti_process_sets():
    """dist.new_group(ranks) on backend tutti registers a tutti process set on
    every rank; its members' ops reduce over the members only, broadcast's src
    is a global rank (torch passes the group rank to the backend), and the
    ranks outside stay idle."""
    rank, size = rank_size()
    odd = [r for r in range(size) if r % 2 == 1]
    members = [r for r in range(size) if r % 2 == 0] if rank % 2 == 0 else odd
    even_group = dist.new_group([r for r in range(size) if r % 2 == 0])
    odd_group = dist.new_group(odd) if odd else None
    group = even_group if rank % 2 == 0 else odd_group
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t, group=group)
    assert torch.equal(t, torch.full((5,), float(sum(r + 1 for r in members))))
    src = members[-1]
    b = torch.full((3,), float(rank))
    dist.broadcast(b, src=src, group=group)
    assert torch.equal(b, torch.full((3,), float(src)))
    gathered = [torch.zeros(2) for _ in members]
    dist.all_gather(gathered, torch.full((2,), float(rank)), group=group)
    assert [g[0].item() for g in gathered] == [float(r) for r in members]
    dist.barrier(group=group)
    # The same ranks again reuse the set; the world still works.
    again = dist.new_group([r for r in range(size) if r % 2 == 0])
    if rank % 2 == 0:
        u = torch.ones(1)
        dist.all_reduce(u, group=again)
        assert u.item() == len(members)
    w = torch.ones(1)
    dist.all_reduce(w)
    assert w.item() == size
    # Leave no sets behind for later tests (removal is collective, in order).
    for ps in list(process_sets.process_sets()):
        if ps.process_set_id != 0:
            process_sets.remove_process_set(ps)


def test_mismatch_is_an_error_on_every_rank():
    rank, size = rank_size()
    shape = (2, 3) if rank == 0 else (3, 2)  # equal element counts: the same op name
    work = dist.all_reduce(torch.ones(shape), async_op=True)
    if size == 1:
        assert work.wait()
        return
    with pytest.raises(RuntimeError, match="MismatchError.*shapes differ"):
        work.wait()
    with pytest.raises(RuntimeError, match="MismatchError.*shapes differ"):
        dist.broadcast(torch.ones(shape), 0)  # blocking: torch calls wait() itself
    t = torch.ones(1)
    dist.all_reduce(t)  # the group goes on
    assert t.item() == size


def test_complex_sum_through_the_real_view():
    rank, size = rank_size()
    t = torch.tensor([complex(rank, 1), complex(1, -rank)], dtype=torch.complex64)
    dist.all_reduce(t)  # torch passes view_as_real(t) to the group
    total = sum(range(size))
    assert t.tolist() == [complex(total, size), complex(size, -total)]


def _mismatch_cases(group, rank):
    """Each kind of disagreement torch's contract forbids, on `group`: every
    rank raises the same MismatchError naming the op's number, and the group
    goes on (gloo would hang or return garbage here)."""
    first = rank == min(dist.get_process_group_ranks(group))
    # rank 0 all_reduce, the others all_gather
    t = torch.ones(4)
    with pytest.raises(RuntimeError, match=r"MismatchError.*ordered collective #\d+.*collectives "
                                           r"differ.*allreduce.*allgather|MismatchError.*ordered "
                                           r"collective #\d+.*collectives differ.*allgather.*"
                                           r"allreduce"):
        if first:
            dist.all_reduce(t, group=group)
        else:
            out = [torch.empty(4) for _ in range(dist.get_world_size(group))]
            dist.all_gather(out, t, group=group)
    # element counts differ
    with pytest.raises(RuntimeError, match=r"MismatchError.*ordered collective.*shapes differ"):
        dist.all_reduce(torch.ones(5 if first else 6), group=group)
    # one rank skipped a call: its broadcast meets the others' all_reduce
    if not first:
        with pytest.raises(RuntimeError, match=r"MismatchError.*collectives differ"):
            dist.all_reduce(torch.ones(3), group=group)
    with pytest.raises(RuntimeError, match=r"MismatchError.*collectives differ"):
        dist.broadcast(torch.ones(3), dist.get_global_rank(group, 0), group=group)
    if first:  # back in step: one more call on the rank that skipped
        with pytest.raises(RuntimeError, match=r"MismatchError"):
            dist.all_reduce(torch.ones(3), group=group)
    t = torch.ones(2)
    dist.all_reduce(t, group=group)
    assert t.tolist() == [dist.get_world_size(group)] * 2


def test_ordered_mismatch_kinds_on_every_rank():
    rank, size = rank_size()
    if size == 1:
        return
    # A group of its own: a DDP comm hook registered by an earlier test turns
    # the default group's ops to negotiated ones (hook_ddp_comm_hooks).
    _mismatch_cases(dist.new_group(list(range(size))), rank)
    if size >= 3:
        sub = dist.new_group([1, 2])  # every rank creates it (torch's rule)
        if rank in (1, 2):
            _mismatch_cases(sub, rank)
        dist.barrier()

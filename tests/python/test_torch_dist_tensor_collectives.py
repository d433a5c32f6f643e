"""What torch 2.x code calls on a "tutti" group: the tensor and coalesced
collectives FSDP2 and DTensor issue, PREMUL_SUM, dtypes tutti only moves
(float8), monitored_barrier, the Work API, functional collectives, DTensor
and DeviceMesh. Values are computed by hand from every rank's inputs.

Runs on both torches (Debian's 1.13 and PyPI's 2.x) under tuttirun; a test
of an API the running torch lacks is skipped, saying which.
"""

import datetime
import time

import pytest
import torch
import torch.distributed as dist

from torch_dist_util import TORCH2, groups, rank_size


@pytest.fixture(scope="module", autouse=True)
def tutti_group():
    groups()


def needs(flag, what):
    if not flag:
        pytest.skip("this torch (%s) has no %s" % (torch.__version__, what))


def test_reduce_scatter_tensor_and_all_gather_into_tensor():
    rank, size = rank_size()
    inp = torch.arange(3.0 * size) + 10 * rank
    out = torch.empty(3)
    dist.reduce_scatter_tensor(out, inp)
    base = torch.arange(3.0 * size)[3 * rank:3 * rank + 3]
    assert out.tolist() == (size * base + 10 * sum(range(size))).tolist()
    gathered = torch.empty(2 * size, dtype=torch.int64)
    dist.all_gather_into_tensor(gathered, torch.tensor([rank, -rank]))
    assert gathered.tolist() == [v for r in range(size) for v in (r, -r)]


def test_tensor_collectives_in_a_coalescing_manager():
    """FSDP2-style: several all_gather_into_tensor / reduce_scatter_tensor /
    all_reduce ops coalesced into one call each (torch 2.x)."""
    needs(hasattr(dist, "_coalescing_manager") and TORCH2, "coalescing manager for this backend")
    rank, size = rank_size()
    ins = [torch.full((2,), float(rank)), torch.full((3,), float(10 + rank))]
    outs = [torch.empty(2 * size), torch.empty(3 * size)]
    with dist._coalescing_manager():
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    assert outs[0].tolist() == [float(r) for r in range(size) for _ in range(2)]
    assert outs[1].tolist() == [float(10 + r) for r in range(size) for _ in range(3)]
    rs_in = [torch.arange(2.0 * size) * (rank + 1), torch.ones(size) * rank]
    rs_out = [torch.empty(2), torch.empty(1)]
    with dist._coalescing_manager():
        for o, i in zip(rs_out, rs_in):
            dist.reduce_scatter_tensor(o, i, op=dist.ReduceOp.AVG)
    mean_factor = sum(r + 1 for r in range(size)) / size
    assert rs_out[0].tolist() == pytest.approx([mean_factor * (2 * rank), mean_factor * (2 * rank + 1)])
    assert rs_out[1].tolist() == pytest.approx([(size - 1) / 2])
    ar = [torch.full((4,), float(rank)), torch.full((1,), 2.0)]
    with dist._coalescing_manager():
        for t in ar:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert ar[0].tolist() == [float(size - 1)] * 4 and ar[1].tolist() == [2.0]


def test_all_gather_coalesced_lists():
    rank, size = rank_size()
    ins = [torch.tensor([rank, rank + 100]), torch.tensor([[rank * 2]])]
    outs = [[torch.empty(2, dtype=torch.int64), torch.empty(1, 1, dtype=torch.int64)]
            for _ in range(size)]  # torch's layout: per rank, then per input
    group = dist.group.WORLD
    work = group.allgather_coalesced(outs, ins)
    work.wait()
    assert [[o.tolist() for o in per_rank] for per_rank in outs] == [
        [[r, r + 100], [[2 * r]]] for r in range(size)]


def test_all_to_all_single_uneven_splits():
    """Rank r sends p + 1 rows to rank p; receives r + 1 rows from each."""
    rank, size = rank_size()
    send = [p + 1 for p in range(size)]
    inp = torch.cat([torch.full((p + 1, 2), float(100 * rank + p)) for p in range(size)])
    out = torch.empty(size * (rank + 1), 2)
    dist.all_to_all_single(out, inp, [rank + 1] * size, send)
    want = torch.cat([torch.full((rank + 1, 2), float(100 * q + rank)) for q in range(size)])
    assert torch.equal(out, want)


FLOAT8 = [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]


@pytest.mark.parametrize("dtype", FLOAT8 or [None])
def test_float8_moves_and_refuses_reduction(dtype):
    needs(dtype is not None, "float8 dtypes")
    rank, size = rank_size()
    mine = torch.tensor([0.5 * (rank + 1), -2.0]).to(dtype)
    gathered = torch.empty(2 * size, dtype=dtype)
    dist.all_gather_into_tensor(gathered, mine)
    want = torch.cat([torch.tensor([0.5 * (r + 1), -2.0]).to(dtype) for r in range(size)])
    assert torch.equal(gathered.view(torch.uint8), want.view(torch.uint8))
    b = mine.clone()
    dist.broadcast(b, src=0)
    assert b.float().tolist() == [0.5, -2.0]
    with pytest.raises(RuntimeError, match=str(dtype)):
        dist.all_reduce(mine)


def test_monitored_barrier_passes_when_all_arrive():
    group = dist.group.WORLD
    if TORCH2:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    else:  # torch 1.13's Python function admits gloo only; the group's method is ours
        group.monitored_barrier(datetime.timedelta(seconds=30))
    dist.monitored_barrier(group=groups()[1], timeout=datetime.timedelta(seconds=30))


def _monitored(timeout):
    if TORCH2:
        dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)
    else:
        dist.group.WORLD.monitored_barrier(timeout, True)


def test_monitored_barrier_names_the_late_rank():
    """The last rank comes late: rank 0 names it (gloo's sentence), the others
    are not released in time; afterwards every rank is in step again."""
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs a second rank")
    late = size - 1
    timeout = datetime.timedelta(seconds=1)
    if rank == late:
        time.sleep(2.5)
    with pytest.raises(RuntimeError) as err:
        _monitored(timeout if rank != late else datetime.timedelta(seconds=0.5))
    if rank == 0:
        assert "Ranks %d failed to pass monitoredBarrier in 1000 ms" % late in str(err.value)
    else:
        assert "did not release rank %d" % rank in str(err.value)
    dist.barrier()
    _monitored(datetime.timedelta(seconds=30))


def test_work_api():
    rank, size = rank_size()
    t = torch.full((3,), float(rank))
    work = dist.all_reduce(t, async_op=True)
    assert work.wait(timeout=datetime.timedelta(seconds=60))
    assert work.get_future().done()
    assert work.get_future().value()[0].tolist() == [float(sum(range(size)))] * 3
    assert work.is_completed() and work.is_success() and work.exception() is None


def test_work_wait_timeout_raises_and_the_op_goes_on():
    """Rank 0 waits 0.2 s for an op the others start 1.5 s later: wait(timeout)
    raises naming the timeout; the op then completes with the right sum."""
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs a second rank")
    t = torch.ones(2)
    if rank != 0:
        time.sleep(1.5)
    work = dist.all_reduce(t, async_op=True)
    if rank == 0:
        with pytest.raises(RuntimeError, match="timed out"):
            work.wait(timeout=datetime.timedelta(seconds=0.2))
    work.wait()
    assert t.tolist() == [float(size)] * 2


def test_blocking_op_error_raises_on_every_rank():
    """A blocking dist op whose tutti op fails raises it (torch 2.x's own
    future Work would swallow it): shapes differ across ranks -> tutti's
    mismatch error on every rank."""
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs a second rank")
    with pytest.raises(RuntimeError, match="MismatchError|shape"):
        dist.broadcast(torch.zeros(2, 3) if rank == 0 else torch.zeros(3, 2), src=0)
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == size


def test_functional_collectives():
    needs(TORCH2, "functional collectives on third-party backends")
    import torch.distributed._functional_collectives as fc

    rank, size = rank_size()
    group = dist.group.WORLD
    ar = fc.all_reduce(torch.full((2,), float(rank + 1)), "sum", group)
    assert ar.tolist() == [float(size * (size + 1) / 2)] * 2
    ag = fc.all_gather_tensor(torch.tensor([float(rank)]), 0, group)
    assert ag.tolist() == [float(r) for r in range(size)]
    rs = fc.reduce_scatter_tensor(torch.arange(2.0 * size), "sum", 0, group)
    assert rs.tolist() == [size * 2.0 * rank, size * (2.0 * rank + 1)]
    a2a = fc.all_to_all_single(torch.arange(float(size)) + 10 * rank, [1] * size, [1] * size,
                               group)
    assert a2a.tolist() == [10.0 * q + rank for q in range(size)]


def test_dtensor_redistribute_over_a_device_mesh():
    needs(TORCH2, "DTensor")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    rank, size = rank_size()
    mesh = init_device_mesh("cpu", (size,))
    full = torch.arange(4.0 * size * 2).reshape(4 * size, 2)
    d = distribute_tensor(full, mesh, [Shard(0)])
    assert torch.equal(d.to_local(), full[4 * rank:4 * rank + 4])
    assert torch.equal(d.redistribute(mesh, [Replicate()]).to_local(), full)
    assert torch.equal(d.redistribute(mesh, [Shard(1)]).full_tensor(), full)
    from torch.distributed.tensor import DTensor

    partial = DTensor.from_local(torch.full((3,), float(rank)), mesh, [Partial()])
    assert partial.redistribute(mesh, [Replicate()]).to_local().tolist() == \
        [float(sum(range(size)))] * 3
    assert torch.equal((d * 2).sum().full_tensor(), (full * 2).sum())


def test_new_subgroups_run_over_process_sets():
    needs(TORCH2 or torch.cuda.is_available(), "CPU subgroups from new_subgroups (1.x needs CUDA)")
    rank, size = rank_size()
    if size % 2 == 1 and size > 1:
        group_size = 1
    else:
        group_size = min(2, size)
    sub, _ = dist.new_subgroups(group_size=group_size)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=sub)
    first = rank - rank % group_size
    assert t.item() == float(sum(range(first, first + group_size)))


def test_collectives_under_inference_mode():
    """Inside torch.inference_mode() (Lightning's test loop) the outputs are
    inference tensors, which tutti's completion thread writes in that mode."""
    rank, size = rank_size()
    with torch.inference_mode():
        t = torch.full((3,), float(rank + 1))
        dist.all_reduce(t)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        gathered = torch.empty(3 * size)
        dist.all_gather_into_tensor(gathered, t)
    total = float(sum(range(1, size + 1)))
    assert t.tolist() == [total * size] * 3
    assert gathered.tolist() == [total * size] * (3 * size)

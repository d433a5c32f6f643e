"""Point-to-point on a "tutti" group: send/recv, isend/irecv,
batch_isend_irecv, subgroup ranks, and a two-stage pipeline (torch 2.x's
torch.distributed.pipelining where present) against the same model run in
one process. Runs on both torches under tuttirun.
"""

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from torch_dist_util import groups, needs_pair, rank_size


@pytest.fixture(scope="module", autouse=True)
def tutti_group():
    groups()


def test_send_recv_ring_with_tags():
    """Rank r sends [r, tag] to r+1 under two tags, posted in opposite orders."""
    needs_pair()
    rank, size = rank_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    works = [dist.isend(torch.tensor([rank, tag]), right, tag=tag) for tag in (7, 3)]
    got = {tag: torch.zeros(2, dtype=torch.int64) for tag in (3, 7)}
    for tag in (3, 7):
        dist.recv(got[tag], src=left, tag=tag)
    for w in works:
        w.wait()
    assert {t: v.tolist() for t, v in got.items()} == {3: [left, 3], 7: [left, 7]}


def test_batch_isend_irecv_exchanges_with_both_neighbours():
    needs_pair()
    rank, size = rank_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    from_left, from_right = torch.zeros(3), torch.zeros(3)
    ops = [dist.P2POp(dist.isend, torch.full((3,), float(rank)), right),
           dist.P2POp(dist.irecv, from_left, left)]
    if size > 2:
        ops += [dist.P2POp(dist.isend, torch.full((3,), float(-rank)), left),
                dist.P2POp(dist.irecv, from_right, right)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert from_left.tolist() == [float(left)] * 3
    if size > 2:
        assert from_right.tolist() == [float(-right)] * 3


def test_mismatched_message_errors_on_both_ranks():
    needs_pair()
    rank, _ = rank_size()
    if rank == 0:
        with pytest.raises(RuntimeError, match="MismatchError"):
            dist.send(torch.ones(4), dst=1, tag=11)
    elif rank == 1:
        with pytest.raises(RuntimeError, match="MismatchError"):
            dist.recv(torch.ones(5), src=0, tag=11)
    dist.barrier()


def test_recv_without_src_takes_a_message_from_any_rank():
    """Every other rank sends to rank 0, which receives without src: recv
    returns each sender once (test_torch_distributed_gloo compares with gloo)."""
    needs_pair()
    rank, size = rank_size()
    if rank != 0:
        dist.send(torch.tensor([rank]), dst=0, tag=4)
    else:
        got = []
        for _ in range(size - 1):
            t = torch.zeros(1, dtype=torch.int64)
            got.append((dist.recv(t, tag=4), t.item()))
        assert sorted(got) == [(r, r) for r in range(1, size)]
    dist.barrier()


def test_subgroup_ranks_are_group_ranks():
    """In the subgroup of ranks 1.., torch turns the global dst/src into group
    ranks and the backend back into global ones: global 1 (group rank 0) sends
    to global 2 (group rank 1). Needs 3 ranks to send."""
    needs_pair()
    rank, size = rank_size()
    members = list(range(1, size))
    group = dist.new_group(members)
    if len(members) < 2 or rank not in members[:2]:
        return
    if rank == members[0]:
        dist.send(torch.tensor([42.0]), dst=members[1], group=group)
    else:
        t = torch.zeros(1)
        dist.recv(t, src=members[0], group=group)
        assert t.item() == 42.0


def make_stages():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh()), nn.Linear(8, 2)


def test_two_stage_pipeline_equals_one_process():
    """Rank 0 runs stage 0 and sends activations; rank 1 runs stage 1, sends
    the activations' gradient back; both step SGD. Equals one process."""
    needs_pair()
    rank, _ = rank_size()
    torch.manual_seed(11)
    x, y = torch.randn(6, 5), torch.randn(6, 2)
    ref0, ref1 = make_stages()
    nn.functional.mse_loss(ref1(ref0(x)), y).backward()
    s0, s1 = make_stages()
    if rank == 0:
        act = s0(x)
        dist.send(act.detach(), dst=1, tag=1)
        grad = torch.zeros_like(act)
        dist.recv(grad, src=1, tag=2)
        act.backward(grad)
        for p, q in zip(s0.parameters(), ref0.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    elif rank == 1:
        act = torch.zeros(6, 8, requires_grad=True)
        with torch.no_grad():
            dist.recv(act, src=0, tag=1)
        nn.functional.mse_loss(s1(act), y).backward()
        dist.send(act.grad, dst=0, tag=2)
        for p, q in zip(s1.parameters(), ref1.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    dist.barrier()


def test_torch_pipelining_schedule_gpipe():
    """torch.distributed.pipelining (torch 2.x): a 2-stage GPipe schedule with
    4 micro-batches on ranks 0 and 1 trains like one process."""
    pipelining = pytest.importorskip("torch.distributed.pipelining")
    needs_pair()
    rank, size = rank_size()
    group = dist.new_group([0, 1])
    if rank > 1:
        return
    torch.manual_seed(11)
    x, y = torch.randn(8, 5), torch.randn(8, 2)
    ref0, ref1 = make_stages()
    for m in range(4):
        sl = slice(2 * m, 2 * m + 2)
        (nn.functional.mse_loss(ref1(ref0(x[sl])), y[sl]) / 4).backward()
    stages = make_stages()
    stage = pipelining.PipelineStage(stages[rank], rank, 2, torch.device("cpu"), group=group)
    loss = (lambda out, target: nn.functional.mse_loss(out, target))
    schedule = pipelining.ScheduleGPipe(stage, n_microbatches=4, loss_fn=loss)
    if rank == 0:
        schedule.step(x)
    else:
        schedule.step(target=y)
    ref = (ref0, ref1)[rank]
    for p, q in zip(stages[rank].parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)

"""Point-to-point messages (tutti.torch.send/recv and their async forms,
tutti/torch/p2p.py): a 2-stage pipeline (rank 0 sends activations to rank 1,
rank 1 sends the gradients back) whose gradients match the same model run in
one process; posting order within a tag, tags out of order, a ring at every
size, non-contiguous tensors, and the errors (mismatch on both sides, bad
peers). Ranks other than 0 and 1 take no part in the pairs' messages.
"""

import time

import pytest
import torch

import tutti.torch as hvd


def test_send_to_self_and_bad_peers_fail_at_once():
    t = torch.zeros(3)
    with pytest.raises(hvd.InvalidArgumentError, match="cannot send a message to itself"):
        hvd.send(t, hvd.rank())
    with pytest.raises(hvd.InvalidArgumentError, match="is not in process set 0"):
        hvd.recv(t, hvd.size())
    with pytest.raises(hvd.InvalidArgumentError, match="32-bit"):
        hvd.send_async(t, 0, tag=2 ** 40)
    with pytest.raises(hvd.InvalidArgumentError, match="expected an int"):
        hvd.recv_async(t, "1")


def _model():
    torch.manual_seed(1234)
    stage0 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh())
    stage1 = torch.nn.Linear(16, 4)
    return stage0, stage1


def _batches(n):
    g = torch.Generator().manual_seed(99)
    return [(torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g)) for _ in range(n)]


def test_two_stage_pipeline_gradients_match_one_process():
    r, s = hvd.rank(), hvd.size()
    if s < 2:
        return
    micro = 4
    # The reference: both stages in this process.
    ref0, ref1 = _model()
    for x, y in _batches(micro):
        torch.nn.functional.mse_loss(ref1(ref0(x)), y).backward()
    stage0, stage1 = _model()
    if r == 0:
        # Forward every micro-batch (async sends, tag 0), then take each
        # gradient back (tag 1) in the same order.
        acts, sends = [], []
        for x, _ in _batches(micro):
            acts.append(stage0(x))
            sends.append(hvd.send_async(acts[-1].detach(), dst=1, tag=0))
        for act in acts:
            grad = hvd.recv(torch.empty_like(act), src=1, tag=1)
            act.backward(grad)
        for h in sends:
            assert hvd.synchronize(h) is None
        for p, q in zip(stage0.parameters(), ref0.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    elif r == 1:
        handles = [hvd.recv_async(torch.empty(5, 16), src=0, tag=0) for _ in range(micro)]
        for h, (_, y) in zip(handles, _batches(micro)):
            act = hvd.synchronize(h).requires_grad_()
            torch.nn.functional.mse_loss(stage1(act), y).backward()
            hvd.send(act.grad, dst=0, tag=1)
        for p, q in zip(stage1.parameters(), ref1.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    hvd.barrier()


def test_one_tag_keeps_posting_order_and_tags_are_independent():
    r, s = hvd.rank(), hvd.size()
    if s < 2 or r > 1:
        hvd.barrier()
        return
    if r == 0:
        hs = [hvd.send_async(torch.full((k + 1,), float(k)), 1, tag=7) for k in range(20)]
        late = hvd.send_async(torch.arange(6, dtype=torch.int64), 1, tag=8)
        for h in hs + [late]:
            hvd.synchronize(h)
    else:
        # Tag 8 first, although it was sent last.
        got = hvd.recv(torch.zeros(6, dtype=torch.int64), 0, tag=8)
        assert got.tolist() == list(range(6))
        hs = [hvd.recv_async(torch.zeros(k + 1), 0, tag=7) for k in range(20)]
        while not all(hvd.poll(h) for h in hs):
            time.sleep(0.001)
        for k, h in enumerate(hs):
            assert hvd.synchronize(h).tolist() == [float(k)] * (k + 1)
    hvd.barrier()


def test_ring_at_every_size_with_non_contiguous_tensors():
    r, s = hvd.rank(), hvd.size()
    if s < 2:
        return
    src_t = (torch.arange(12, dtype=torch.float64).reshape(3, 4) + 100 * r).t()  # not contiguous
    out = torch.zeros(4, 6, dtype=torch.float64)[:, ::2]  # a strided view of 4 x 3
    hs = hvd.send_async(src_t, (r + 1) % s, tag=3)
    got = hvd.recv(out, (r - 1) % s, tag=3)
    hvd.synchronize(hs)
    assert got is out
    left = (r - 1) % s
    expected = (torch.arange(12, dtype=torch.float64).reshape(3, 4) + 100 * left).t()
    assert torch.equal(out, expected)


def test_mismatch_raises_on_both_ranks_then_the_pair_goes_on():
    r, s = hvd.rank(), hvd.size()
    if s < 2 or r > 1:
        hvd.barrier()
        return
    with pytest.raises(hvd.MismatchError, match=r"p2p 0->1 tag 11 #0.*float32.*int32"):
        if r == 0:
            hvd.send(torch.ones(4), 1, tag=11)
        else:
            hvd.recv(torch.zeros(4, dtype=torch.int32), 0, tag=11)
    if r == 0:
        hvd.send(torch.ones(2, 2), 1, tag=11)
    else:
        assert hvd.recv(torch.zeros(4), 0, tag=11).tolist() == [1.0] * 4
    hvd.barrier()

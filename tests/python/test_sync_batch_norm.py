"""hvd.SyncBatchNorm: on every rank, the output, the input gradient and the
running statistics equal torch.nn.BatchNorm's on the global batch (every
rank's samples concatenated in rank order), with uneven and empty per-rank
batches; the weight and bias gradients are this rank's share (their sum over
ranks is the global batch's gradient). float64, so the comparisons are tight.
"""

import pytest
import torch

import tutti.torch as hvd


def rank_batch(r, shape_of, seed):
    g = torch.Generator().manual_seed(seed * 1000 + r)
    return torch.randn(shape_of(r), generator=g, dtype=torch.float64) * (1 + r) + r


def upstream(n_total, shape_rest, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n_total,) + shape_rest, generator=g, dtype=torch.float64)


def check_against_global_batch(reference_cls, rows, rest, seed, momentum=0.1, steps=2):
    """rows(r): this rank's batch size; rest: the (C, *) shape."""
    n, r = hvd.size(), hvd.rank()
    channels = rest[0]
    sync = hvd.SyncBatchNorm(channels, momentum=momentum).double()
    ref = reference_cls(channels, momentum=momentum).double()
    with torch.no_grad():
        w = torch.linspace(0.5, 1.5, channels, dtype=torch.float64)
        b = torch.linspace(-1.0, 1.0, channels, dtype=torch.float64)
        for m in (sync, ref):
            m.weight.copy_(w)
            m.bias.copy_(b)
    offsets = [0]
    for q in range(n):
        offsets.append(offsets[-1] + rows(q))
    for step in range(steps):
        xs = [rank_batch(q, lambda q: (rows(q),) + rest, seed + step) for q in range(n)]
        full = torch.cat(xs).requires_grad_(True)
        mine = xs[r].clone().requires_grad_(True)
        g = upstream(offsets[-1], rest, seed + 100 + step)
        sync.zero_grad()
        ref.zero_grad()
        y = sync(mine)
        (y * g[offsets[r]:offsets[r + 1]]).sum().backward()
        y_ref = ref(full)
        (y_ref * g).sum().backward()
        lo, hi = offsets[r], offsets[r + 1]
        torch.testing.assert_close(y, y_ref[lo:hi].detach(), rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(mine.grad, full.grad[lo:hi], rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(sync.running_mean, ref.running_mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(sync.running_var, ref.running_var, rtol=1e-12, atol=1e-12)
        # Weight and bias gradients are this rank's share of the global one.
        for local, want in ((sync.weight.grad, ref.weight.grad), (sync.bias.grad, ref.bias.grad)):
            summed = hvd.allreduce(local, op=hvd.Sum, name="sbn.check")
            torch.testing.assert_close(summed, want, rtol=1e-9, atol=1e-10)
    assert int(sync.num_batches_tracked) == steps
    return sync, ref


def test_conv_features_uneven_batches_match_batchnorm_on_the_global_batch():
    check_against_global_batch(torch.nn.BatchNorm2d, lambda q: 2 + q, (3, 4, 5), seed=1)


def test_flat_features_and_cumulative_momentum():
    check_against_global_batch(torch.nn.BatchNorm1d, lambda q: 3 + 2 * q, (6,), seed=2,
                               momentum=None, steps=3)


def test_a_rank_with_an_empty_batch_contributes_nothing():
    if hvd.size() == 1:
        pytest.skip("needs two ranks (every rank runs this check the same way)")
    check_against_global_batch(torch.nn.BatchNorm1d, lambda q: 0 if q == 0 else 2 + q, (4, 3),
                               seed=3)


def test_eval_uses_the_running_statistics_without_collectives():
    sync, ref = check_against_global_batch(torch.nn.BatchNorm2d, lambda q: 2, (2, 3, 3), seed=4,
                                           steps=1)
    sync.eval()
    ref.eval()
    x = rank_batch(hvd.rank(), lambda q: (5, 2, 3, 3), seed=5)
    before = hvd.bytes_sent()
    torch.testing.assert_close(sync(x), ref(x), rtol=1e-12, atol=1e-12)
    assert hvd.bytes_sent() == before


def test_float32_input_and_input_without_grad():
    n, r = hvd.size(), hvd.rank()
    sync = hvd.SyncBatchNorm(3)
    ref = torch.nn.BatchNorm1d(3)
    xs = [rank_batch(q, lambda q: (4, 3), seed=6).float() for q in range(n)]
    y = sync(xs[r])  # no gradient needed for the input: backward has no collective
    y.sum().backward()
    y_ref = ref(torch.cat(xs))
    torch.testing.assert_close(y, y_ref[4 * r:4 * r + 4].detach(), rtol=1e-5, atol=1e-5)
    summed = hvd.allreduce(sync.weight.grad, op=hvd.Sum, name="sbn.f32")
    y_ref.sum().backward()
    torch.testing.assert_close(summed, ref.weight.grad, rtol=1e-4, atol=1e-4)


def test_one_rank_may_evaluate_alone():
    # Eval never synchronises (as torch.nn.SyncBatchNorm), also without
    # running statistics (then this rank's own batch, as torch's BatchNorm).
    if hvd.rank() == 0:
        for track in (True, False):
            sync = hvd.SyncBatchNorm(2, track_running_stats=track).double().eval()
            ref = torch.nn.BatchNorm1d(2, track_running_stats=track).double().eval()
            x = rank_batch(0, lambda q: (6, 2), seed=7)
            torch.testing.assert_close(sync(x), ref(x), rtol=1e-12, atol=1e-12)
    hvd.barrier()


def test_every_rank_empty_gives_an_empty_output():
    sync = hvd.SyncBatchNorm(3)
    x = torch.zeros(0, 3, 2, requires_grad=True)
    y = sync(x)
    assert tuple(y.shape) == (0, 3, 2)
    y.sum().backward()
    assert tuple(x.grad.shape) == (0, 3, 2)
    assert torch.equal(sync.running_mean, torch.zeros(3))
    assert torch.equal(sync.running_var, torch.ones(3))


def test_double_backward_raises_instead_of_a_wrong_gradient():
    sync = hvd.SyncBatchNorm(2).double()
    x = rank_batch(hvd.rank(), lambda q: (4, 2), seed=8).requires_grad_(True)
    (g,) = torch.autograd.grad(sync(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|double backward|twice"):
        g.sum().backward()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sixteen_bit_input_normalises_in_float32(dtype):
    # A float32 module on 16-bit inputs (autocast's layout): statistics in
    # float32, output and input gradient in the input's dtype.
    n, r = hvd.size(), hvd.rank()
    sync = hvd.SyncBatchNorm(3)
    ref = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        for m in (sync, ref):
            m.weight.copy_(torch.tensor([0.5, 1.0, 2.0]))
            m.bias.copy_(torch.tensor([-1.0, 0.0, 3.0]))
    xs = [rank_batch(q, lambda q: (4, 3, 2), seed=9).to(dtype) for q in range(n)]
    mine = xs[r].clone().requires_grad_(True)
    y = sync(mine)
    assert y.dtype == dtype
    y.float().pow(2).sum().backward()
    full = torch.cat(xs).float().requires_grad_(True)
    y_ref = ref(full)
    y_ref.pow(2).sum().backward()
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    torch.testing.assert_close(y.float(), y_ref[4 * r:4 * r + 4].detach(), rtol=tol, atol=tol)
    assert mine.grad.dtype == dtype
    torch.testing.assert_close(mine.grad.float(), full.grad[4 * r:4 * r + 4], rtol=0.1, atol=0.1)
    torch.testing.assert_close(sync.running_var, ref.running_var, rtol=1e-5, atol=1e-6)


def test_bad_inputs_are_named():
    sync = hvd.SyncBatchNorm(3)
    with pytest.raises(ValueError, match="floating-point input"):
        sync(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="got 1 dimension"):
        sync(torch.zeros(3))
    with pytest.raises(ValueError, match="got 4 channels"):
        sync(torch.zeros(2, 4))
    if hvd.size() > 1:
        # One value per channel over the whole job (rank 0 has one row, the others none).
        rows = 1 if hvd.rank() == 0 else 0
        with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
            sync(torch.ones(rows, 3))


def test_convert_sync_batchnorm_keeps_parameters_and_buffers():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                                torch.nn.Sequential(torch.nn.Flatten(), torch.nn.BatchNorm1d(8)))
    with torch.no_grad():
        model[1].weight.fill_(2.0)
        model[1].running_mean.fill_(0.5)
    model.eval()
    converted = hvd.SyncBatchNorm.convert_sync_batchnorm(model, process_group=None)
    assert isinstance(converted[1], hvd.SyncBatchNorm)
    assert isinstance(converted[2][1], hvd.SyncBatchNorm)
    assert isinstance(converted[0], torch.nn.Conv2d)
    assert float(converted[1].weight[0]) == 2.0 and float(converted[1].running_mean[0]) == 0.5
    assert not converted[1].training

"""DistributedOptimizer, Compression and broadcast_optimizer_state as in
horovod.torch 0.28.1: each against single-process torch training on the
whole global batch (test_optimizer.py's helpers) or hand-computed values."""

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import tutti.torch as hvd
from tutti.torch import _optimizer_setup  # the count of optimizers per process set
from test_optimizer import ROWS_PER_RANK, flat, global_batch, make_model, reference_training
from tutti.torch.compression import Compression, Compressor, FP16Compressor, NoneCompressor


def mine():
    r = hvd.rank()
    return slice(ROWS_PER_RANK * r, ROWS_PER_RANK * (r + 1))


def train(model, opt, steps, before_step=None, loss_scale=1.0):
    """Each rank trains on its rows of global_batch through `opt`."""
    for step in range(steps):
        x, y = global_batch(step, hvd.size())
        opt.zero_grad()
        (F.mse_loss(model(x[mine()]), y[mine()]) * loss_scale).backward()
        if before_step is not None:
            before_step()
        opt.step()


def same_on_every_rank(tensor, name):
    gathered = hvd.allgather(tensor.unsqueeze(0), name=name)
    return torch.equal(gathered.min(0).values, gathered.max(0).values)


def sgd(m):
    return torch.optim.SGD(m.parameters(), lr=0.1)


# ---- Compression (Horovod's horovod.torch.compression) --------------------------


def test_compressors_are_horovods():
    assert hvd.compression.Compression is hvd.Compression is Compression
    assert hvd.Compression.none is NoneCompressor and hvd.Compression.fp16 is FP16Compressor
    assert issubclass(FP16Compressor, Compressor) and issubclass(NoneCompressor, Compressor)
    x = torch.tensor([1.0, 1.0 / 3.0, 70000.0, -2.5e-8], dtype=torch.float64)
    c, ctx = hvd.Compression.fp16.compress(x)
    assert c.dtype == torch.float16 and ctx == torch.float64
    assert torch.equal(c, x.to(torch.float16))  # 70000 -> inf, 1/3 rounded, as a cast
    back = hvd.Compression.fp16.decompress(c, ctx)
    assert back.dtype == torch.float64 and torch.equal(back, x.to(torch.float16).double())
    ints = torch.arange(4)
    c, ctx = hvd.Compression.fp16.compress(ints)
    assert c is ints and hvd.Compression.fp16.decompress(c, ctx) is ints
    c, ctx = hvd.Compression.none.compress(x)
    assert c is x and ctx is None and hvd.Compression.none.decompress(c, ctx) is x


class Recording(Compressor):
    """Sends 3 * tensor as float64; decompress adds 100 (visible in results)."""

    calls = []

    @staticmethod
    def compress(tensor):
        Recording.calls.append(("compress", tensor.dtype))
        return tensor.double() * 3, ("ctx", tensor.dtype)

    @staticmethod
    def decompress(tensor, ctx):
        Recording.calls.append(("decompress", ctx))
        assert ctx[0] == "ctx"
        return (tensor + 100).to(ctx[1])


def test_custom_compressor_runs_around_allreduce():
    r, s = hvd.rank(), hvd.size()
    Recording.calls.clear()
    x = torch.arange(5, dtype=torch.float32) + r
    out = hvd.allreduce(x, name="hc.custom", op=hvd.Sum, compression=Recording)
    expected = 3 * (torch.arange(5, dtype=torch.float32) * s + s * (s - 1) / 2) + 100
    assert out.dtype == torch.float32 and torch.equal(out, expected)
    assert Recording.calls == [("compress", torch.float32), ("decompress", ("ctx", torch.float32))]


class Halving(FP16Compressor):
    """A subclass of Horovod's FP16Compressor runs in Python, not as tutti's fp16."""

    calls = 0

    @staticmethod
    def compress(tensor):
        Halving.calls += 1
        return tensor * 0.5, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return (tensor * 2).to(ctx)


@pytest.mark.parametrize("compressor", [Halving, Halving()], ids=["class", "instance"])
def test_custom_compressor_in_distributed_optimizer(compressor):
    s = hvd.size()
    model = make_model(seed=3)
    reference = reference_training(model, 2, s, sgd)
    Halving.calls = 0
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                   compression=compressor)
    train(model, opt, 2)
    # Once per gradient and step (no hooks, so no allreduce, at size 1, as Horovod).
    assert Halving.calls == (4 * 2 if s > 1 else 0)
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6)


# ---- DistributedOptimizer ---------------------------------------------------------


def test_unnamed_parameters_get_horovods_generated_names():
    s = hvd.size()
    model = make_model(seed=4)

    def two_groups(m):
        return torch.optim.SGD([{"params": m[0].parameters()},
                                {"params": m[2].parameters(), "lr": 0.05}], lr=0.1)

    reference = reference_training(model, 2, s, two_groups)
    opt = hvd.DistributedOptimizer(two_groups(model))
    assert sorted(opt._parameter_names.values()) == [
        "allreduce.noname.0.0", "allreduce.noname.0.1",
        "allreduce.noname.1.0", "allreduce.noname.1.1"]
    train(model, opt, 2)
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6)


def test_gan_optimizers_over_equal_names_never_mix():
    """A generator and a discriminator of the same architecture (equal
    parameter names), their backward passes in an order that differs by rank:
    each trains as it would alone on the global batch."""
    r, s = hvd.rank(), hvd.size()
    gen, disc = make_model(seed=5), make_model(seed=6)
    adam = lambda m: torch.optim.Adam(m.parameters(), lr=0.01)  # noqa: E731
    ref_gen = reference_training(gen, 3, s, sgd)
    ref_disc = reference_training(disc, 3, s, adam, loss_scale=2.0)
    opt_gen = hvd.DistributedOptimizer(sgd(gen), named_parameters=gen.named_parameters())
    opt_disc = hvd.DistributedOptimizer(adam(disc), named_parameters=disc.named_parameters())
    for step in range(3):
        x, y = global_batch(step, s)
        opt_gen.zero_grad(set_to_none=True)
        opt_disc.zero_grad()
        losses = [F.mse_loss(gen(x[mine()]), y[mine()]),
                  F.mse_loss(disc(x[mine()]), y[mine()]) * 2.0]
        for loss in (losses if r % 2 == 0 else losses[::-1]):
            loss.backward()
        opt_disc.step()
        opt_gen.step()
    assert torch.allclose(flat(gen), flat(ref_gen), rtol=1e-5, atol=1e-6)
    assert torch.allclose(flat(disc), flat(ref_disc), rtol=1e-5, atol=1e-6)


def test_optimizers_constructed_in_different_numbers_is_a_mismatch(monkeypatch):
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    # The count of optimizers over the global set (id 0) constructed before.
    monkeypatch.setattr(_optimizer_setup, "_constructed", {0: 100 + hvd.rank()})
    model = make_model(seed=0)
    with pytest.raises(hvd.MismatchError, match="rank 0 100, rank 1 101"):
        hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters())


def test_gradient_predivide_factor_gives_the_average():
    s = hvd.size()
    model = make_model(seed=8)
    reference = reference_training(model, 2, s, sgd)
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                   gradient_predivide_factor=4.0)
    train(model, opt, 2)
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="op != Average"):
        hvd.DistributedOptimizer(sgd(model), op=hvd.Sum, gradient_predivide_factor=2.0)


def test_sum_op_gives_size_times_the_average():
    s = hvd.size()
    model = make_model(seed=9)
    # Summing the ranks' shard-mean gradients: s times the global mean's.
    reference = reference_training(model, 2, s, sgd, loss_scale=float(s))
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                   op=hvd.Sum)
    train(model, opt, 2)
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", ["groups=2", "groups=list", "num_groups=2"])
def test_groups_allreduce_together_and_match(how):
    s = hvd.size()
    model = make_model(seed=10)
    w0, b0, w2, b2 = model[0].weight, model[0].bias, model[2].weight, model[2].bias
    reference = reference_training(model, 2, s, sgd)
    kwargs = {"groups=2": dict(groups=2), "num_groups=2": dict(num_groups=2),
              "groups=list": dict(groups=[[w2, b0]])}[how]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters(),
                                       **kwargs)
    deprecated = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecated) == (1 if how == "num_groups=2" else 0)
    # Horovod's forming: an int splits the parameters (in param_groups order)
    # into consecutive groups; a list names groups, the rest go alone.
    expected = ([(w2, b0), (w2, b0), (w0,), (b2,)] if how == "groups=list"
                else [(w2, b2), (w0, b0), (w0, b0), (w2, b2)])
    assert [opt._p_to_group[p] for p in (w2, b0, w0, b2)] == expected
    seen = []
    train(model, opt, 2, before_step=lambda: seen.append(sorted(
        len(k) for k in opt._handles if isinstance(k, tuple))))
    # Grouped allreduces in flight before step() (no hooks at size 1).
    assert seen == [([1, 1, 2] if how == "groups=list" else [2, 2]) if s > 1 else []] * 2
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6)


def test_synchronize_clip_and_skip_synchronize():
    s = hvd.size()
    model = make_model(seed=12)

    def clipped_reference():
        ref = copy.deepcopy(model)
        opt = sgd(ref)
        for step in range(2):
            x, y = global_batch(step, s)
            opt.zero_grad()
            F.mse_loss(ref(x), y).backward()
            assert torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05) > 0.1  # clips
            opt.step()
        return ref

    reference = clipped_reference()
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters())
    for step in range(2):
        x, y = global_batch(step, s)
        opt.zero_grad()
        F.mse_loss(model(x[mine()]), y[mine()]).backward()
        opt.synchronize()  # the averaged gradient, clipped as one
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        with opt.skip_synchronize():
            opt.step()
    assert torch.allclose(flat(model), flat(reference), rtol=1e-5, atol=1e-6)
    opt.zero_grad()
    F.mse_loss(model(x[mine()]), y[mine()]).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()


# ---- broadcast_optimizer_state -----------------------------------------------------


def adam_step(model, opt, x, y, layers=None):
    opt.zero_grad()
    out = model(x) if layers is None else model[:layers](x).sum(1, keepdim=True)
    F.mse_loss(out, y[:, :1] if layers is not None else y).backward()
    opt.step()


def test_broadcast_optimizer_state_removes_what_root_lacks():
    """Rank 0 is fresh (or stepped only its first layer); the other ranks
    stepped everything on their own data. After the broadcast the next step
    is root's on every rank. A fresh root first takes Horovod's zero-gradient
    step (Adam's step 1 with zero moments); a root with state does not, and
    what it lacks (the other layers' state) is removed on every rank."""
    r = hvd.rank()
    for partial in (False, True):
        model = make_model(seed=13)
        start = copy.deepcopy(model)
        adam = lambda m: torch.optim.Adam(m.parameters(), lr=0.01)  # noqa: E731
        x0, y0 = global_batch(0, 1)
        xr, yr = global_batch(50 + r, 1)
        xs, ys = global_batch(99, 1)
        # Root's history in one process: what every rank must end with.
        ref = copy.deepcopy(start)
        ref_opt = adam(ref)
        if partial:
            adam_step(ref, ref_opt, x0, y0, layers=1)
        else:  # Horovod's initialization: zero gradients, one step
            for p in ref.parameters():
                p.grad = torch.zeros_like(p)
            ref_opt.step()
        adam_step(ref, ref_opt, xs, ys)
        opt = adam(model)
        if r != 0:
            adam_step(model, opt, xr, yr)
        elif partial:
            adam_step(model, opt, x0, y0, layers=1)
        if r != 0:
            opt.state[model[0].weight]["stale"] = torch.ones(1)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        assert len(opt.state) == (2 if partial else len(list(model.parameters())))
        assert all(set(st) == {"step", "exp_avg", "exp_avg_sq"} for st in opt.state.values())
        adam_step(model, opt, xs, ys)
        assert torch.allclose(flat(model), flat(ref), rtol=1e-6, atol=1e-7), partial
        assert same_on_every_rank(flat(model), "hc.optstate.%d" % partial)

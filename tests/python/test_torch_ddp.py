"""DistributedDataParallel, ZeroRedundancyOptimizer and DDP comm hooks on
tutti: training equals single-process training on the concatenated batch.

Every rank builds the same model (same seed) and the same global batches; the
DDP model trains on its rank's slice, the reference on the whole batch with
the same loss (mean over the global batch). float64 throughout, so that
"equal" means equal up to summation order (1e-9), except where a hook
compresses to float16.
"""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_dist_util import groups
from tutti.torch.distributed import TuttiHookState, allreduce_hook

PER_RANK = 4
STEPS = 4


class Net(nn.Module):
    """8 -> 16 -> 3, and a head that forward() uses only when asked."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 3)
        self.spare = nn.Linear(16, 3)

    def forward(self, x, use_spare=False):
        h = torch.tanh(self.a(x))
        return self.b(h) + (self.spare(h) if use_spare else 0)


def make_net():
    torch.manual_seed(1234)
    return Net().double()


def batch(step):
    """The global batch of a step: the same on every rank."""
    g = torch.Generator().manual_seed(100 + step)
    n = PER_RANK * dist.get_world_size()
    return (torch.randn(n, 8, generator=g, dtype=torch.float64),
            torch.randn(n, 3, generator=g, dtype=torch.float64))


def mine(t):
    r = dist.get_rank()
    return t[r * PER_RANK:(r + 1) * PER_RANK]


def loss_fn(model, x, y, step, all_used):
    """Odd steps use the spare head; even ones leave it unused (unless all_used)."""
    return nn.functional.mse_loss(model(x, use_spare=all_used or step % 2 == 1), y)


def train(model, opt, distributed, steps=STEPS, accumulate=False, all_used=False):
    """Steps of SGD/Adam; distributed: on this rank's slice, else on the whole
    batch. accumulate: two micro-batches per step, the first under no_sync()."""
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(step)
        if distributed:
            x, y = mine(x), mine(y)
        if accumulate:
            x2, y2 = batch(step + 1000)
            if distributed:
                x2, y2 = mine(x2), mine(y2)
                with model.no_sync():
                    loss_fn(model, x2, y2, 0, all_used).backward()
            else:
                loss_fn(model, x2, y2, 0, all_used).backward()
        loss_fn(model, x, y, step, all_used).backward()
        opt.step()
    return model.module if distributed else model


def assert_same(a, b, tol=1e-9):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=tol, atol=tol, msg=name)


OPTIMIZERS = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
              "adam": lambda p: torch.optim.Adam(p, lr=0.01)}


def reference(opt_name, accumulate=False):
    net = make_net()
    return train(net, OPTIMIZERS[opt_name](net.parameters()), False, accumulate=accumulate)


@pytest.fixture(scope="module", autouse=True)
def tutti_group():
    groups()


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
@pytest.mark.parametrize("as_view", [False, True])
def test_ddp_equals_single_process(opt_name, as_view):
    ddp = DDP(make_net(), find_unused_parameters=True, gradient_as_bucket_view=as_view,
              bucket_cap_mb=0.0005)  # several buckets in flight at once
    assert dist.get_backend(ddp.process_group).lower() == "tutti"
    trained = train(ddp, OPTIMIZERS[opt_name](ddp.parameters()), True)
    assert_same(trained, reference(opt_name))


def test_ddp_no_sync_accumulates():
    ddp = DDP(make_net(), find_unused_parameters=True)
    trained = train(ddp, OPTIMIZERS["sgd"](ddp.parameters()), True, accumulate=True)
    assert_same(trained, reference("sgd", accumulate=True))


def test_ddp_static_graph_equals_single_process():
    """static_graph=True: every parameter used every step (all_used)."""
    ddp = DDP(make_net(), static_graph=True, bucket_cap_mb=0.0005)
    trained = train(ddp, OPTIMIZERS["sgd"](ddp.parameters()), True, all_used=True)
    net = make_net()
    ref = train(net, OPTIMIZERS["sgd"](net.parameters()), False, all_used=True)
    assert_same(trained, ref)


def run_hook(group, hook, state, steps=STEPS, opt_name="sgd", find_unused=True):
    ddp = DDP(make_net(), process_group=group, find_unused_parameters=find_unused)
    ddp.register_comm_hook(state, hook)
    return train(ddp, OPTIMIZERS[opt_name](ddp.parameters()), True, steps=steps,
                 all_used=not find_unused)


def test_torch_fp16_compress_hook_on_tutti():
    tutti_group, gloo_group = groups()
    on_tutti = run_hook(tutti_group, default_hooks.fp16_compress_hook, tutti_group)
    assert_same(on_tutti, reference("sgd"), tol=2e-3)  # float16 buckets
    on_gloo = run_hook(gloo_group, default_hooks.fp16_compress_hook, gloo_group)
    assert_same(on_tutti, on_gloo, tol=2e-3)


def test_torch_powersgd_hook_on_tutti_equals_gloo():
    tutti_group, gloo_group = groups()
    results = []
    for group in (tutti_group, gloo_group):
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, min_compression_rate=0.5,
                                       orthogonalization_epsilon=1e-8)
        # find_unused_parameters=False: with it, DDP's unused-parameter allreduce
        # races PowerSGD's callback collectives for gloo's order (gloo then fails
        # with "op.preamble.length <= op.nbytes"); tutti names ops by signature.
        results.append(run_hook(group, powersgd.powerSGD_hook, state, steps=5,
                                find_unused=False))
    assert_same(results[0], results[1], tol=1e-7)
    # Compressed gradients: not the reference, but every rank holds the same model.
    flat = torch.cat([p.detach().reshape(-1) for p in results[0].parameters()])
    every = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat)
    for other in every:
        assert torch.equal(other, flat)


def test_zero_redundancy_optimizer_equals_plain():
    ddp = DDP(make_net(), find_unused_parameters=True)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    trained = train(ddp, opt, True)
    assert_same(trained, reference("adam"))
    opt.consolidate_state_dict(to=0)
    if dist.get_rank() == 0:
        assert len(opt.state_dict()["state"]) == len(list(ddp.parameters()))


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_tutti_hook_on_gloo_ddp(opt_name):
    _, gloo_group = groups()
    trained = run_hook(gloo_group, allreduce_hook, TuttiHookState(compression="none"),
                       opt_name=opt_name)
    assert_same(trained, reference(opt_name))


def test_tutti_hook_with_state_none():
    """register_comm_hook(state=None, hook=allreduce_hook), as torch's own
    hooks take it, on a tutti DDP model and on a gloo one."""
    tutti_group, gloo_group = groups()
    for group in (tutti_group, gloo_group):
        assert_same(run_hook(group, allreduce_hook, None), reference("sgd"))


def test_tutti_hook_with_fp16_compression():
    _, gloo_group = groups()
    trained = run_hook(gloo_group, allreduce_hook, TuttiHookState(compression="fp16"))
    assert_same(trained, reference("sgd"), tol=2e-3)
    if dist.get_world_size() > 1:  # compression really happened: not equal to the reference
        diff = max((p - q).abs().max().item()
                   for p, q in zip(trained.parameters(), reference("sgd").parameters()))
        assert diff > 1e-9


def test_hook_state_rejects_python_compressor():
    class Mine:
        @staticmethod
        def compress(t):
            return t, None

        @staticmethod
        def decompress(t, ctx):
            return t

    with pytest.raises(TypeError, match="tutti.Compression member or a spec string"):
        TuttiHookState(compression=Mine)


def test_ddp_model_copy_is_independent():
    # DDP on tutti twice in a row with deep-copied modules: names never collide.
    a = DDP(make_net())
    b = DDP(copy.deepcopy(a.module))
    for m in (a, b):
        x, y = batch(0)
        nn.functional.mse_loss(m(mine(x)), mine(y)).backward()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-12, atol=1e-12)

"""FSDP2 (fully_shard), HSDP and torch.compile on a "tutti" group (torch 2.x):
training equals single-process training on the concatenated batch.

Every rank builds the same model (same seed) and the same global batches;
the sharded model trains on its rank's slice with the mean loss of that
slice, the reference on the whole batch: FSDP2 averages gradients over the
data-parallel ranks, so both take the same steps. float32 compute; with
bfloat16 parameters (MixedPrecisionPolicy) within bfloat16's tolerance.
Skipped on torch 1.x, which has no FSDP2.
"""

import importlib.util

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from torch_dist_util import groups

# FSDP2 needs DeviceMesh (torch 2.x); torch 1.13's FSDP package does not even
# import on Python 3.11, so look for the mesh before importing it.
if importlib.util.find_spec("torch.distributed.device_mesh") is None:
    pytest.skip("torch %s has no DeviceMesh/FSDP2" % torch.__version__, allow_module_level=True)

import torch.distributed.fsdp as fsdp  # noqa: E402

if not hasattr(fsdp, "fully_shard"):
    pytest.skip("torch %s has no FSDP2 (fully_shard)" % torch.__version__, allow_module_level=True)
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402

PER_RANK = 4
STEPS = 3


@pytest.fixture(scope="module", autouse=True)
def tutti_group():
    groups()


@pytest.fixture(autouse=True)
def in_step():
    """A barrier after each test: a test's last collectives may run in one
    mesh dimension's groups only (HSDP's shards), and a rank that finished
    the file and shut tutti down would end the others' ops (tutti's job ends
    at the first shutdown; docs/torch-distributed.md)."""
    yield
    dist.barrier()


def make_net():
    torch.manual_seed(4321)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12), nn.Tanh(),
                         nn.Linear(12, 2))


def batch(step, dp_size):
    g = torch.Generator().manual_seed(50 + step)
    n = PER_RANK * dp_size
    return torch.randn(n, 6, generator=g), torch.randn(n, 2, generator=g)


def train(model, steps, dp_rank=None, dp_size=1, accumulate=False):
    """SGD with momentum on the global batches of dp_size ranks; dp_rank None:
    the whole batch (the reference), else that rank's slice.
    accumulate: a first micro-batch whose gradients are not synchronised."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        opt.zero_grad()
        micro = [batch(step + 1000, dp_size)] if accumulate else []
        for i, (x, y) in enumerate(micro + [batch(step, dp_size)]):
            if dp_rank is not None:
                x, y = x[dp_rank * PER_RANK:(dp_rank + 1) * PER_RANK], \
                    y[dp_rank * PER_RANK:(dp_rank + 1) * PER_RANK]
                if accumulate:
                    model.set_requires_gradient_sync(i == len(micro))
            nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def full_params(model):
    return [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]


def shard_every_layer(model, mesh, **kwargs):
    for layer in model:
        if isinstance(layer, nn.Linear):
            fsdp.fully_shard(layer, mesh=mesh, **kwargs)
    return fsdp.fully_shard(model, mesh=mesh, **kwargs)


@pytest.mark.parametrize("accumulate", [False, True])
def test_fully_shard_equals_single_process(accumulate):
    rank, size = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (size,))
    ref = train(make_net(), STEPS, dp_size=size, accumulate=accumulate)
    model = train(shard_every_layer(make_net(), mesh), STEPS, rank, size, accumulate)
    for p, q in zip(full_params(model), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


def test_fully_shard_mixed_precision():
    """bfloat16 parameters for compute, float32 gradient reduction."""
    rank, size = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (size,))
    policy = fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    ref = train(make_net(), STEPS, dp_size=size)
    model = train(shard_every_layer(make_net(), mesh, mp_policy=policy), STEPS, rank, size)
    for p, q in zip(full_params(model), ref.parameters()):
        assert p.dtype == torch.float32  # sharded parameters stay float32
        torch.testing.assert_close(p, q, rtol=0.05, atol=0.03)


def test_hybrid_sharding_over_a_2d_mesh():
    """HSDP: replicate across mesh dim 0, shard across dim 1 (process sets
    per mesh dimension). Needs an even world size of at least 4."""
    rank, size = dist.get_rank(), dist.get_world_size()
    if size < 4 or size % 2:
        pytest.skip("HSDP needs an even world size >= 4 (this job: %d)" % size)
    mesh = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("replicate", "shard"))
    ref = train(make_net(), STEPS, dp_size=size)
    model = train(shard_every_layer(make_net(), mesh), STEPS, rank, size)
    for p, q in zip(full_params(model), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


def test_compiled_model_under_ddp():
    """torch.compile (dynamo, DDP's graph-splitting optimizer, aot_eager: no C++
    code generation) of a DDP model on tutti trains like the eager reference."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, size = dist.get_rank(), dist.get_world_size()
    ref = train(make_net(), STEPS, dp_size=size)
    ddp = DDP(make_net())
    compiled = torch.compile(ddp, backend="aot_eager")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        opt.zero_grad()
        x, y = batch(step, size)
        sl = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        nn.functional.mse_loss(compiled(x[sl]), y[sl]).backward()
        opt.step()
    for p, q in zip(ddp.module.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


def test_functional_collective_traced_by_compile():
    """A function doing a functional all_reduce, compiled with fullgraph=True:
    the collective is in the graph and gives the sum on every rank."""
    import torch.distributed._functional_collectives as fc

    rank, size = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD

    def f(x):
        return fc.all_reduce(x * 2, "sum", group) + 1

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out = compiled(torch.full((3,), float(rank)))
    assert out.tolist() == [2.0 * sum(range(size)) + 1] * 3

"""examples/torch_zero_sharded.py (docs/process-sets.md): the ZeRO-1 sharded
optimizer over the even and the odd ranks reaches the parameters of
DistributedOptimizer(process_set=...) on the same batches; each group's
members agree, the model moved, and the two groups (two learning rates)
trained different models at the same time."""

import importlib.util
import os

import torch

import tutti.torch as hvd

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "torch_zero_sharded.py")


def load_example():
    spec = importlib.util.spec_from_file_location("torch_zero_sharded", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_sharded_optimizer_matches_distributed_optimizer():
    ex = load_example()
    registered = ex.groups()
    try:
        ps, lr = [(ps, lr) for ps, lr in registered if ps.included()][0]
        start = flat(ex.make_model(seed=7))
        sharded, _ = ex.train(12, ps, lr, sharded=True)
        reference, _ = ex.train(12, ps, lr, sharded=False)
        torch.testing.assert_close(flat(sharded), flat(reference), rtol=1e-5, atol=1e-6)
        assert (flat(sharded) - start).abs().max() > 1e-3  # it trained
        # Every member of the group holds the same model; the groups differ.
        every = hvd.allgather(flat(sharded)[None])
        for q in range(hvd.size()):
            same_group = ps.ranks if ps.included() and q in ps.ranks else None
            if same_group is not None:
                assert torch.equal(every[q], every[hvd.rank()])
            elif hvd.size() > 1:
                assert not torch.equal(every[q], every[hvd.rank()])
    finally:
        for ps, _ in registered:
            hvd.remove_process_set(ps)


def test_run_checks_itself():
    diff = load_example().run(steps=5, check=True, verbose=False)
    assert diff is not None and diff < 1e-5

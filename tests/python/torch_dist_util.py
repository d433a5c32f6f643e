"""Shared by the torch.distributed tests: one "tutti" default group and one
gloo group over every rank per process, made on first use and kept (torch's
store-based barrier cannot run init_process_group twice on one store), and
the small helpers every one of those test files uses."""

import pytest
import torch
import torch.distributed as dist

import tutti.torch as hvd
import tutti.torch.distributed  # noqa: F401 (registers "tutti")

# torch 2.x (its ProcessGroup wraps a Python Backend; torch 1.13 has no Backend class).
TORCH2 = hasattr(torch._C._distributed_c10d, "Backend")
_groups = {}


def groups():
    """(tutti group, gloo group): the default group and a gloo one, every rank."""
    if not _groups:
        hvd.init()
        if not dist.is_initialized():
            dist.init_process_group("tutti")
        _groups["tutti"] = dist.group.WORLD
        _groups["gloo"] = dist.new_group(backend="gloo")
    return _groups["tutti"], _groups["gloo"]


def rank_size():
    """(rank, world size) in the default group."""
    return dist.get_rank(), dist.get_world_size()


def needs_pair():
    """Skips the calling test on a world of one rank."""
    if dist.get_world_size() < 2:
        pytest.skip("needs a second rank")

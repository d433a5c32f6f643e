"""Shared by the torch.distributed tests: one "tutti" default group and one
gloo group over every rank per process, made on first use and kept (torch's
store-based barrier cannot run init_process_group twice on one store)."""

import torch.distributed as dist

import tutti.torch as hvd
import tutti.torch.distributed  # noqa: F401 (registers "tutti")

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

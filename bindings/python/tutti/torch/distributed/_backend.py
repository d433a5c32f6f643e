"""Registering "tutti" with torch.distributed and joining the tutti job.

Three ways a process gets here, each ending with tutti initialised on the same
ranks as torch's group:
- tuttirun (or mpirun): TUTTI_* placement is set; tutti.init() joins. torch
  also needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for its own store
  (env://); prepare_tuttirun_env() sets the ones that are missing, with a store
  server that rank 0 starts on a free port (torch's TCPStore shares it).
- torchrun or any other torch launcher: the creator bootstraps tutti from the
  store torch passes it (tutti.torch._torchrun.set_env_from_store).
- tutti already initialised (hvd.init() first): only the ranks are checked.
"""

import datetime
import os
import socket

import torch.distributed as dist

from tutti import basics, process_sets
from tutti.torch import _torchrun
from tutti.torch.distributed.process_group import ProcessGroupTutti

BACKEND = "tutti"
_server = []  # the TCPStore server rank 0 started for torch's env:// (kept alive)


def _address_towards(host):
    """This host's address on the route to `host` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return s.getsockname()[0]
    except OSError:
        return socket.getfqdn()


def prepare_tuttirun_env():
    """Under tuttirun/mpirun with MASTER_ADDR or MASTER_PORT unset: joins tutti,
    starts a TCPStore server on rank 0 (a free port, multi-tenant so that
    torch's env:// store reuses it), broadcasts its address, and sets RANK,
    WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT where
    unset. A collective: every rank must import tutti.torch.distributed.
    Does nothing under other launchers or when both MASTER_* are set."""
    env = os.environ
    if not _torchrun.has_tutti_env():
        return
    basics.init()
    env.setdefault("RANK", str(basics.rank()))
    env.setdefault("WORLD_SIZE", str(basics.size()))
    env.setdefault("LOCAL_RANK", str(basics.local_rank()))
    env.setdefault("LOCAL_WORLD_SIZE", str(basics.local_size()))
    if "MASTER_ADDR" in env and "MASTER_PORT" in env:
        return
    from tutti.torch import functions

    address = None
    if basics.rank() == 0:
        store = dist.TCPStore("0.0.0.0", 0, None, True, datetime.timedelta(seconds=300),
                              wait_for_workers=False, multi_tenant=True)
        _server.append(store)
        host = _address_towards(env.get("TUTTI_RENDEZVOUS_ADDR", "127.0.0.1"))
        address = (env.get("MASTER_ADDR", host), store.port)
    address = functions.broadcast_object(address, 0, name="torch.distributed.store")
    env.setdefault("MASTER_ADDR", address[0])
    env.setdefault("MASTER_PORT", str(address[1]))


def process_set_for(global_ranks, world_size):
    """The tutti process set for a torch group of `global_ranks` (sorted global
    ranks; None or every rank: the whole job). Returns (process_set, error):
    process_set None means tutti's global set; error, when not None, is the
    message every op of the group raises. Called on the group's members only
    (torch creates a group's backend on its members); the set itself was
    registered on every rank by new_group (see wrap_new_group)."""
    if global_ranks is None or list(global_ranks) == list(range(world_size)):
        return None, None
    ranks = sorted(global_ranks)
    for ps in process_sets.process_sets():
        if ps.ranks == ranks:
            return ps, None
    return None, ("tutti backend: no tutti process set has the ranks %s of this group; create "
                  "subgroups with torch.distributed.new_group (on every rank) after importing "
                  "tutti.torch.distributed, which registers the set" % (ranks,))


def _uses_tutti(backend):
    if backend is not None:
        return str(backend).lower() == BACKEND
    return dist.is_initialized() and str(dist.get_backend()).lower() == BACKEND


def wrap_new_group():
    """torch.distributed.new_group, which every rank calls in the same order
    (torch requires it), also registers the tutti process set of a subgroup
    that runs on backend "tutti", on every rank: a tutti set is registered
    collectively, while torch creates the group's backend on its members only.
    An existing set with the same ranks is reused."""
    original = dist.new_group
    if getattr(original, "_tutti_wrapped", False):
        return

    def new_group(ranks=None, *args, **kwargs):
        backend = kwargs.get("backend", args[1] if len(args) > 1 else None)
        if ranks is not None and _uses_tutti(backend):
            wanted = sorted(set(int(r) for r in ranks))
            world = dist.get_world_size()
            known = any(ps.ranks == wanted for ps in process_sets.process_sets())
            if wanted and wanted != list(range(world)) and not known:
                process_sets.add_process_set(wanted)
        return original(ranks, *args, **kwargs)

    new_group._tutti_wrapped = True  # noqa: SLF001
    new_group.__doc__ = original.__doc__
    dist.new_group = new_group


def ensure_joined(store, rank, size):
    """tutti initialised as rank `rank` of `size` (see the module docstring).
    Raises RuntimeError when tutti already runs with other ranks."""
    if not basics.is_initialized():
        if not _torchrun.has_tutti_env():
            _torchrun.set_env_from_store(store, rank, size)
        basics.init()
    if (basics.rank(), basics.size()) != (rank, size):
        raise RuntimeError(
            "tutti backend: torch says rank %d of %d but tutti runs as rank %d of %d; start the "
            "job with one launcher (tuttirun or torchrun) and let both read its variables"
            % (rank, size, basics.rank(), basics.size()))


def _create(opts, pg_options=None):
    """torch's creator for backend "tutti" (extended API)."""
    del pg_options
    if not dist.is_initialized():  # the default group: every rank
        ensure_joined(opts.store, opts.group_rank, opts.group_size)
        return ProcessGroupTutti(opts.group_rank, opts.group_size, None, opts.group_id)
    world = dist.get_world_size()
    process_set, error = process_set_for(sorted(opts.global_ranks_in_group), world)
    if error is None:
        ensure_joined(opts.store, dist.get_rank(), world)
    return ProcessGroupTutti(opts.group_rank, opts.group_size, process_set, opts.group_id, error)


def register():
    """Registers "tutti" with torch.distributed once per process."""
    if BACKEND.upper() not in dist.Backend._plugins:  # noqa: SLF001 (torch's registry)
        dist.Backend.register_backend(BACKEND, _create, extended_api=True)

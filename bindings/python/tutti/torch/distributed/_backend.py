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

Which class backs a group is chosen by feature detection, not versions:
where torch has the c10d Backend class and register_backend takes device
types (torch 2.x), the creator returns a BackendTutti that torch wraps in
its own ProcessGroup (group names, functional collectives, DTensor, FSDP2);
otherwise (torch 1.x) a ProcessGroupTutti, which is the group itself.
"""

import datetime
import inspect
import os
import socket
from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tutti import basics, process_sets
from tutti.torch import _torchrun, functions
from tutti.torch.distributed._work import see_through_works
from tutti.torch.distributed.process_group import ProcessGroupTutti

BACKEND = "tutti"
DEVICES = ["cpu", "cuda"]  # CUDA tensors need a CUDA build of tutti (an op says so otherwise)


def uses_c10d_backend() -> bool:
    """True where torch wraps third-party c10d Backends in its ProcessGroup
    (torch 2.x: the Backend class and register_backend(..., devices=))."""
    register = dist.Backend.register_backend
    return (hasattr(torch._C._distributed_c10d, "Backend")
            and "devices" in inspect.signature(register).parameters)


GroupClass: type
if uses_c10d_backend():
    # torch 2.x (the module needs torch._C._distributed_c10d.Backend, absent in 1.x)
    from tutti.torch.distributed.backend import BackendTutti

    GroupClass = BackendTutti
else:
    GroupClass = ProcessGroupTutti  # torch 1.x
_server: List[Any] = []  # the TCPStore server rank 0 started for torch's env:// (kept alive)


def _address_towards(host: str) -> str:
    """This host's address on the route to `host` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return s.getsockname()[0]
    except OSError:
        return socket.getfqdn()


def prepare_tuttirun_env() -> None:
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


def process_set_for(global_ranks: Optional[Sequence[int]], world_size: int
                    ) -> Tuple[Optional[process_sets.ProcessSet], Optional[str]]:
    """The tutti process set for a torch group of `global_ranks` (sorted global
    ranks; None or every rank: the whole job). Returns (process_set, error):
    process_set None means tutti's global set; error, when not None, is the
    message every op of the group raises. Called on the group's members only
    (torch creates a group's backend on its members); the set itself was
    registered on every rank when torch created the group (hook_new_groups)."""
    if global_ranks is None or list(global_ranks) == list(range(world_size)):
        return None, None
    ranks = sorted(global_ranks)
    for ps in process_sets.process_sets():
        if ps.ranks == ranks:
            return ps, None
    return None, ("tutti backend: no tutti process set has the ranks %s of this group; create "
                  "subgroups with torch.distributed.new_group (on every rank) after importing "
                  "tutti.torch.distributed, which registers the set" % (ranks,))


def _names_tutti(backend: object) -> bool:
    """backend as torch passes it ("tutti", "cpu:tutti,cuda:nccl", a Backend)."""
    parts = [p.split(":")[-1] for p in str(backend).lower().split(",")]
    return BACKEND in parts


def hook_new_groups() -> None:
    """Registers the tutti process set of every new subgroup on backend
    "tutti", on every rank. torch's group creation (new_group, new_subgroups,
    DeviceMesh's groups) runs c10d's _new_process_group_helper on every rank
    of the job in the same order, members and non-members alike (torch's
    rule), but creates the group's backend on its members only; a tutti set
    is registered collectively, so it is registered here, before torch goes
    on. An existing set with the same ranks is reused. Groups made with
    use_local_synchronization=True (members only) cannot be mapped: their
    members would wait for the others; create them without it."""
    original = c10d._new_process_group_helper  # noqa: SLF001 (torch's one place)
    if getattr(original, "_tutti_hooked", False):
        return

    def helper(group_size: int, group_rank: int, global_ranks_in_group: Optional[Sequence[int]],
               backend: object, *args: Any, **kwargs: Any) -> Any:
        ranks = sorted(set(int(r) for r in global_ranks_in_group or []))
        if ranks and _names_tutti(backend) and dist.is_initialized():
            known = any(ps.ranks == ranks for ps in process_sets.process_sets())
            if ranks != list(range(dist.get_world_size())) and not known:
                process_sets.add_process_set(ranks)
        return original(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)

    setattr(helper, "_tutti_hooked", True)  # noqa: B010 (an attribute functions lack)
    setattr(helper, "__wrapped__", original)  # noqa: B010
    c10d._new_process_group_helper = helper  # noqa: SLF001


def _tutti_ops_of(group: Any) -> Any:
    """The tutti group object behind a torch group (None when not tutti's)."""
    if isinstance(group, GroupClass):
        return group
    try:
        backend = group._get_backend(torch.device("cpu"))  # noqa: SLF001 (torch 2.x)
    except (AttributeError, RuntimeError):
        return None
    return backend if isinstance(backend, GroupClass) else None


def hook_ddp_comm_hooks() -> None:
    """A Python DDP comm hook (PowerSGD's, ...) may start collectives in
    its futures' callbacks, whose order differs across ranks; the ordered
    lane needs the same order. So registering one switches its groups (DDP's
    and the hook state's process_group) to negotiated ops, matched by name,
    on every rank alike (DDP registers hooks on every rank, before
    training). C++ builtin hooks start no collective of their own."""
    ddp = torch.nn.parallel.DistributedDataParallel
    original = ddp.register_comm_hook
    if getattr(original, "_tutti_hooked", False):
        return

    def register_comm_hook(self: Any, state: object, hook: Any) -> Any:
        default = dist.group.WORLD if dist.is_initialized() else None
        for group in (getattr(self, "process_group", None),
                      getattr(state, "process_group", None) or default):
            ops = _tutti_ops_of(group) if group is not None else None
            if ops is not None:
                ops.negotiate_by_name()
        return original(self, state, hook)

    setattr(register_comm_hook, "_tutti_hooked", True)  # noqa: B010
    setattr(register_comm_hook, "__wrapped__", original)  # noqa: B010
    ddp.register_comm_hook = register_comm_hook


def ensure_joined(store: Any, rank: int, size: int) -> None:
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


def _create(opts: Any, pg_options: Any = None) -> Any:
    """torch's creator for backend "tutti" (extended API)."""
    del pg_options
    cls = GroupClass
    store = getattr(opts, "store", None)
    if not dist.is_initialized():  # the default group: every rank
        ensure_joined(opts.store, opts.group_rank, opts.group_size)
        return cls(opts.group_rank, opts.group_size, None, opts.group_id, store=store)
    world = dist.get_world_size()
    process_set, error = process_set_for(sorted(opts.global_ranks_in_group), world)
    if error is None:
        ensure_joined(opts.store, dist.get_rank(), world)
    return cls(opts.group_rank, opts.group_size, process_set, opts.group_id, error, store=store)


def register() -> None:
    """Registers "tutti" with torch.distributed once per process (with its
    device types where torch takes them; there torch's ProcessGroup also
    hands its Python callers the backend's own Work: _work.py)."""
    if BACKEND.upper() in dist.Backend._plugins:  # noqa: SLF001 (torch's registry)
        return
    if uses_c10d_backend():
        see_through_works()
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=DEVICES)
    else:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True)

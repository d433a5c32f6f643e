"""Joining a tutti job from torch.distributed's launchers (torchrun, or any
launcher that gives torch a rendezvous store).

tutti's own launcher (tuttirun) sets TUTTI_RANK, TUTTI_SIZE and the
rendezvous variables. torchrun sets RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT, and serves a
key-value store at MASTER_ADDR:MASTER_PORT (its agent's store). Here rank 0
picks a free TCP port (never MASTER_PORT, which torchrun's agent owns) and a
fresh random secret, publishes them with its address in the store, and every
rank sets the TUTTI_* variables from them before tutti's init() reads them.
rank 0 then serves tutti's rendezvous on that port.

The secret travels through torch's store, which has no authentication of its
own: the job is as private as that store.
"""

import datetime
import os
import secrets
import socket
from typing import Any, List

_KEY = "tutti_bootstrap/"


def has_tutti_env():
    """True when a launcher tutti knows (tuttirun, mpirun) placed this process."""
    return "TUTTI_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ


def under_torchrun():
    """True when torchrun's agent started this process and serves its store."""
    env = os.environ
    return ("TORCHELASTIC_RUN_ID" in env and "MASTER_ADDR" in env and "MASTER_PORT" in env
            and "RANK" in env and "WORLD_SIZE" in env)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _own_address():
    """The address other hosts reach rank 0 at: MASTER_ADDR when set (torchrun
    sets it to the host of rank 0), else this host's name."""
    return os.environ.get("MASTER_ADDR") or socket.getfqdn()


def _placement_env(rank, size):
    """TUTTI_* placement from torchrun's variables (local rank/size and node
    index), defaulting to one host when they are absent."""
    env = os.environ
    local_rank = int(env.get("LOCAL_RANK", rank))
    local_size = int(env.get("LOCAL_WORLD_SIZE", size))
    out = {"TUTTI_RANK": str(rank), "TUTTI_SIZE": str(size),
           "TUTTI_LOCAL_RANK": str(local_rank), "TUTTI_LOCAL_SIZE": str(local_size)}
    if "GROUP_RANK" in env and size % local_size == 0:
        out["TUTTI_CROSS_RANK"] = env["GROUP_RANK"]
        out["TUTTI_CROSS_SIZE"] = str(size // local_size)
    return out


def set_env_from_store(store, rank, size, timeout_s=300):
    """Sets the TUTTI_* variables of this process so that tutti's init() joins
    the job of `size` ranks as `rank`, exchanging rank 0's rendezvous address
    and a secret through `store` (a torch.distributed.Store, e.g. the one
    torch passes to a backend). Every rank of the job must call it once with
    the same store. Raises RuntimeError when rank 0 does not publish within
    timeout_s seconds (the store's own timeout error)."""
    env = _placement_env(rank, size)
    if size > 1:
        if rank == 0:
            address = "%s:%d" % (_own_address(), _free_port())
            secret = secrets.token_hex(16)
            store.set(_KEY + "secret", secret)
            store.set(_KEY + "address", address)  # last: the others wait for it
        else:
            store.set_timeout(datetime.timedelta(seconds=timeout_s))
            store.wait([_KEY + "address"])
            address = store.get(_KEY + "address").decode()
            secret = store.get(_KEY + "secret").decode()
        host, port = address.rsplit(":", 1)
        env.update({"TUTTI_RENDEZVOUS_ADDR": host, "TUTTI_RENDEZVOUS_PORT": port,
                    "TUTTI_SECRET": secret, "TUTTI_RENDEZVOUS_SERVER": "rank0"})
    os.environ.update(env)


_stores: List[Any] = []  # keeps a store this module started serving alive for the process


def set_env_from_torchrun():
    """Under torchrun (under_torchrun()) and without TUTTI_* placement: sets
    the TUTTI_* variables through the store at MASTER_ADDR:MASTER_PORT (keys
    under a prefix of this run and restart, so a restarted group bootstraps
    anew). That store is torchrun's agent store with its default (static)
    rendezvous; with another rendezvous (--standalone, c10d) nobody serves
    that port yet, and rank 0 starts the server there as torch's env:// would
    (shared with torch's own store later in this process: multi_tenant).
    Does nothing otherwise."""
    if has_tutti_env() or not under_torchrun():
        return
    import torch.distributed as dist

    env = os.environ
    rank = int(env["RANK"])
    serve = rank == 0 and env.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), None, serve,
                          datetime.timedelta(seconds=300), wait_for_workers=False,
                          multi_tenant=True)
    _stores.append(store)
    prefix = "tutti/%s/%s/" % (env["TORCHELASTIC_RUN_ID"],
                               env.get("TORCHELASTIC_RESTART_COUNT", "0"))
    set_env_from_store(dist.PrefixStore(prefix, store), rank, int(env["WORLD_SIZE"]))

"""tutti jobs on a Ray cluster: ``RayExecutor``, as ``horovod.ray.RayExecutor``.

    from tutti.ray import RayExecutor

    def train(epochs):
        import tutti.torch as hvd
        hvd.init()
        ...
        return hvd.rank()

    ray.init()
    executor = RayExecutor(num_workers=4, cpus_per_worker=1)
    executor.start()
    ranks = executor.run(train, args=[2])     # [0, 1, 2, 3]
    executor.shutdown()

Each worker is a Ray actor, placed by a placement group (one bundle of
``cpus_per_worker`` CPUs, and ``gpus_per_worker`` GPUs with ``use_gpu``, per
worker; strategy PACK: as few nodes as possible). Worker i is rank i. Workers
on one node (the same Ray node IP) are one host: local ranks count within a
node, in rank order, and cross ranks number the nodes in the order of their
first rank. Before the user's function runs, every actor's environment holds
the TUTTI_* placement, ``TUTTI_RENDEZVOUS_ADDR`` (rank 0's node IP) and
``TUTTI_RENDEZVOUS_PORT`` (a free port on rank 0's node), and a per-job
``TUTTI_SECRET``: ``hvd.init()`` in rank 0's actor serves the rendezvous, the
others connect to it, as in a job started by hand (no tuttirun).

Differences from Horovod: no ``num_hosts`` / ``num_workers_per_host``
(colocated strategy) and no elastic executor; ``settings`` is optional and
only its ``timeout_s`` and ``placement_group_timeout_s`` are used.

Thread-safety: one executor is driven from one thread. Errors: ``ValueError``
for bad arguments, ``TimeoutError`` when the placement group is not ready in
time, ``RuntimeError`` for calls before ``start()``; an exception raised in a
worker's function reaches ``run`` / ``execute`` as Ray's ``RayTaskError``.
"""

import dataclasses
import os
import secrets
import socket
from typing import Any, Callable, Dict, List, Optional

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

__all__ = ["RayExecutor", "placement_env"]


@dataclasses.dataclass
class Settings:
    """What RayExecutor.create_settings returns (Horovod's MiniSettings)."""

    timeout_s: int = 30
    placement_group_timeout_s: int = 100


def placement_env(node_ips: List[str]) -> List[Dict[str, str]]:
    """The TUTTI_* placement of each rank, given the node (host) of each rank.

    Ranks on one node are one host: local rank = index among that node's
    ranks (in rank order), cross rank = index of the node in the order of its
    first rank. Pure function; used by RayExecutor.start.
    """
    nodes: Dict[str, List[int]] = {}
    for rank, ip in enumerate(node_ips):
        nodes.setdefault(ip, []).append(rank)
    envs: List[Dict[str, str]] = [{} for _ in node_ips]
    for cross_rank, ranks in enumerate(nodes.values()):
        for local_rank, rank in enumerate(ranks):
            envs[rank] = {
                "TUTTI_RANK": str(rank),
                "TUTTI_SIZE": str(len(node_ips)),
                "TUTTI_LOCAL_RANK": str(local_rank),
                "TUTTI_LOCAL_SIZE": str(len(ranks)),
                "TUTTI_CROSS_RANK": str(cross_rank),
                "TUTTI_CROSS_SIZE": str(len(nodes)),
            }
    return envs


class _Worker:
    """One rank: an actor process that holds the user's executable object."""

    def __init__(self):
        self.executable = None

    def node_ip(self) -> str:
        return ray.util.get_node_ip_address()

    def free_port(self) -> int:
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def set_env(self, env: Dict[str, str]) -> None:
        os.environ.update(env)

    def start_executable(self, cls, args, kwargs) -> None:
        if cls is not None:
            self.executable = cls(*args, **kwargs)

    def execute(self, fn: Callable[[Any], Any]) -> Any:
        return fn(self.executable)


class RayExecutor:
    """Runs a function on ``num_workers`` Ray actors that form one tutti job.

    Args:
        settings: optional, from ``create_settings`` (Horovod's first
            argument); an int here is taken as ``num_workers``.
        num_workers: number of workers (ranks), at least 1.
        cpus_per_worker: CPUs reserved for each worker (Ray resources).
        use_gpu: reserve ``gpus_per_worker`` GPUs for each worker.
        gpus_per_worker: GPUs per worker with ``use_gpu`` (default 1).
    """

    @classmethod
    def create_settings(cls, timeout_s=30, ssh_identity_file=None, ssh_str=None,
                        placement_group_timeout_s=100):
        """Horovod's settings factory. ``timeout_s`` becomes
        TUTTI_TIMEOUT_SECONDS; the ssh arguments are accepted and unused (Ray
        starts the workers, not ssh)."""
        del ssh_identity_file, ssh_str
        return Settings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s)

    def __init__(self, settings=None, num_workers: Optional[int] = None,
                 cpus_per_worker: int = 1, use_gpu: bool = False,
                 gpus_per_worker: Optional[int] = None):
        if isinstance(settings, int) and not isinstance(settings, bool):
            settings, num_workers = None, settings if num_workers is None else num_workers
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError("num_workers=%r: expected an integer >= 1" % (num_workers,))
        if cpus_per_worker <= 0:
            raise ValueError("cpus_per_worker=%r: expected a number > 0" % (cpus_per_worker,))
        if gpus_per_worker and not use_gpu:
            raise ValueError("gpus_per_worker is set, but use_gpu is False; set use_gpu=True")
        if use_gpu and gpus_per_worker is not None and gpus_per_worker < 1:
            raise ValueError("gpus_per_worker=%r: expected >= 1" % (gpus_per_worker,))
        self.settings = settings or Settings()
        self.num_workers = num_workers
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.workers: List[Any] = []
        self._placement_group = None

    def start(self, executable_cls: Optional[type] = None, executable_args: Optional[List] = None,
              executable_kwargs: Optional[Dict] = None,
              extra_env_vars: Optional[Dict[str, str]] = None) -> None:
        """Creates the workers and their tutti environment; with
        ``executable_cls``, each worker also builds
        ``executable_cls(*executable_args, **executable_kwargs)``, which
        ``execute`` passes to its function."""
        bundle = {"CPU": self.cpus_per_worker}
        if self.use_gpu:
            bundle["GPU"] = self.gpus_per_worker
        pg = placement_group([dict(bundle) for _ in range(self.num_workers)], strategy="PACK")
        ready, _ = ray.wait([pg.ready()], timeout=self.settings.placement_group_timeout_s)
        if not ready:
            remove_placement_group(pg)
            raise TimeoutError(
                "the placement group of %d workers x %s was not ready within %s s (does the "
                "Ray cluster have these resources? ray.cluster_resources())"
                % (self.num_workers, bundle, self.settings.placement_group_timeout_s))
        self._placement_group = pg
        actor = ray.remote(_Worker)
        self.workers = [
            actor.options(num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                          scheduling_strategy=PlacementGroupSchedulingStrategy(
                              placement_group=pg, placement_group_bundle_index=i)).remote()
            for i in range(self.num_workers)]
        ips = ray.get([w.node_ip.remote() for w in self.workers])
        port = ray.get(self.workers[0].free_port.remote())
        common = {
            "TUTTI_RENDEZVOUS_ADDR": ips[0],
            "TUTTI_RENDEZVOUS_PORT": str(port),
            "TUTTI_RENDEZVOUS_SERVER": "rank0",
            "TUTTI_SECRET": secrets.token_hex(32),
            "TUTTI_TIMEOUT_SECONDS": str(self.settings.timeout_s),
        }
        common.update(extra_env_vars or {})
        envs = placement_env(ips)
        ray.get([w.set_env.remote(dict(common, **env)) for w, env in zip(self.workers, envs)])
        ray.get([w.start_executable.remote(executable_cls, executable_args or [],
                                           executable_kwargs or {}) for w in self.workers])

    def _check_started(self):
        if not self.workers:
            raise RuntimeError("RayExecutor: call start() first")

    def execute(self, fn: Callable[[Any], Any]) -> List[Any]:
        """Runs ``fn(executable)`` on every worker (``executable`` is None
        without ``executable_cls``); returns the results in rank order."""
        self._check_started()
        return ray.get([w.execute.remote(fn) for w in self.workers])

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """Runs ``fn(executable)`` on rank 0 only."""
        self._check_started()
        return ray.get(self.workers[0].execute.remote(fn))

    def run_remote(self, fn: Callable[..., Any], args: Optional[List] = None,
                   kwargs: Optional[Dict] = None) -> List[Any]:
        """Starts ``fn(*args, **kwargs)`` on every worker; returns the
        ObjectRefs (``ray.get`` them), in rank order."""
        self._check_started()
        args, kwargs = list(args or []), dict(kwargs or {})
        return [w.execute.remote(lambda _: fn(*args, **kwargs)) for w in self.workers]

    def run(self, fn: Callable[..., Any], args: Optional[List] = None,
            kwargs: Optional[Dict] = None) -> List[Any]:
        """Runs ``fn(*args, **kwargs)`` on every worker; returns the results
        in rank order."""
        return ray.get(self.run_remote(fn, args, kwargs))

    def shutdown(self) -> None:
        """Ends the workers' processes and frees their resources."""
        for w in self.workers:
            ray.kill(w)
        self.workers = []
        if self._placement_group is not None:
            remove_placement_group(self._placement_group)
            self._placement_group = None

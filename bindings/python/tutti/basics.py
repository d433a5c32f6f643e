"""Lifecycle and placement: framework-independent functions over the C API.

Thread-safety: every function may be called from any thread. init() and
shutdown() serialise with each other inside libtutti.
"""

import atexit
import os
from typing import Any, Optional, Sequence, Union

from tutti import _library
from tutti import process_sets as _process_sets
from tutti._placement import (  # noqa: F401 (re-exported: tutti.basics.rank etc.)
    cross_rank,
    cross_size,
    is_initialized,
    local_rank,
    local_size,
    rank,
    size,
)
from tutti.errors import InvalidArgumentError, NotInitializedError


def init(comm: Optional[Any] = None, process_sets: Union[None, str, Sequence[Any]] = None
         ) -> None:
    """Joins the job described by the TUTTI_* environment variables.

    Blocks until every rank connected (at most TUTTI_TIMEOUT_SECONDS). Calling
    it again while initialised does nothing; after shutdown() it starts anew.
    Raises InvalidArgumentError for a bad setting (naming the variable and the
    accepted range), WaitTimeoutError naming ranks that never arrived, TuttiIOError.

    comm: Horovod's MPI communicator or list of ranks; tutti takes the job's
    ranks from its launcher, so it must be None (anything else raises
    InvalidArgumentError before joining, on the rank that passed it).

    process_sets: None, "dynamic" (accepted as Horovod's; tutti needs no
    opt-in for add_process_set() later), or a list of tutti.ProcessSet
    objects registered right after joining, in order (a collective: every
    rank passes the same list), whose process_set_id is then set. As
    Horovod: an entry with the ranks of the global set or of an earlier
    entry is a duplicate (invalidated, ValueError after the others are
    registered); bad ranks raise InvalidArgumentError (a ValueError) on every
    rank. tutti stays initialised when registration fails. See
    tutti.process_sets and docs/process-sets.md.
    """
    if comm is not None:
        raise InvalidArgumentError(
            "init(comm=%r): tutti takes its ranks from the launcher (tuttirun, mpirun, "
            "srun); an MPI communicator or a list of ranks is not accepted, pass comm=None"
            % (comm,), 1)
    entries = _process_sets._static_entries(process_sets)  # checked before joining
    lib = _library.load()
    was_initialized = bool(lib.tutti_is_initialized())
    _library.check(lib.tutti_init())
    _register_atexit()
    _process_sets._init_process_sets(entries, was_initialized)


def shutdown() -> None:
    """Completes pending ops with ShutdownError and leaves the job. Idempotent.
    Every process set but the global one is unregistered (its objects
    invalidated)."""
    _process_sets._forget_all()
    _library.check(_library.load().tutti_shutdown())


def start_timeline(file_path: Union[str, "os.PathLike[str]"], mark_cycles: bool = False) -> None:
    """Starts recording a Chrome-trace timeline (docs/timeline.md), as Horovod's.

    Call it on every rank. Each rank writes its own file: file_path with
    ".rank<R>" inserted before the extension ("timeline.json" ->
    "timeline.rank0.json"). mark_cycles also marks every background round.
    Raises InvalidArgumentError (empty path, or a timeline is already
    recording), TuttiIOError (the file cannot be created), NotInitializedError.
    """
    _library.check(_library.load().tutti_start_timeline(os.fsencode(file_path),
                                                        1 if mark_cycles else 0))


def stop_timeline() -> None:
    """Writes the queued events and closes the timeline file (complete JSON).

    Does nothing when no timeline is recording; shutdown() stops it too.
    """
    _library.check(_library.load().tutti_stop_timeline())


def built_with(feature: str) -> bool:
    """True when libtutti has `feature`: "tcp", "mpi", "nccl" or "cuda"."""
    return bool(_library.load().tutti_built_with(feature.encode()))


def tcp_built() -> bool:
    """True: the tcp backend is always built."""
    return built_with("tcp")


def mpi_built() -> bool:
    """True when libtutti was built with the mpi backend (Open MPI)."""
    return built_with("mpi")


def nccl_built() -> int:
    """The NCCL_VERSION_CODE libtutti was built with (e.g. 22809 for NCCL
    2.28.9; truthy) or 0 without NCCL, as Horovod's nccl_built()."""
    return int(_library.function("tutti_nccl_version")())


def cuda_built() -> bool:
    """True when libtutti was built with CUDA tensor support."""
    return built_with("cuda")


def gloo_built() -> bool:
    """True: tutti's tcp backend (always built) plays the role of Horovod's
    Gloo: collectives and negotiation over TCP without MPI."""
    return tcp_built()


def rocm_built() -> bool:
    """False: tutti has no ROCm support."""
    return False


def ccl_built() -> bool:
    """False: tutti has no oneCCL support."""
    return False


def ddl_built() -> bool:
    """False: tutti has no IBM DDL support."""
    return False


def _backend() -> Optional[str]:
    """The running runtime's backend ("tcp", "mpi", "nccl"), None when not initialised."""
    name = _library.function("tutti_backend")()
    return name.decode() if name is not None else None


def mpi_enabled() -> bool:
    """True when tutti is initialised on the mpi backend (TUTTI_BACKEND=mpi,
    or under mpirun), as Horovod's: MPI runs the controller. False before
    init() and on the other backends."""
    return _backend() == "mpi"


def gloo_enabled() -> bool:
    """True when tutti is initialised on its tcp controller (the tcp backend,
    or nccl, whose negotiation and host tensors go over tcp): Horovod's Gloo
    mode. False before init() and on the mpi backend."""
    return _backend() in ("tcp", "nccl")


def mpi_threads_supported() -> bool:
    """Whether MPI runs with MPI_THREAD_MULTIPLE, so that the script may call
    MPI (e.g. mpi4py) while tutti runs. As Horovod's: ValueError when MPI is
    not enabled (mpi_enabled() is False, also before init())."""
    if not mpi_enabled():
        raise ValueError("tutti MPI is not enabled: initialise under mpirun or with "
                         "TUTTI_BACKEND=mpi (mpi_enabled() is False)")
    supported = _library.function("tutti_mpi_threads_supported")()
    if supported < 0:
        raise NotInitializedError("tutti has not been initialized; use init()", 7)
    return bool(supported)


def is_homogeneous() -> bool:
    """True when every host runs the same number of ranks, i.e. size() ==
    local_size() * cross_size() (cross_size() is the number of hosts). Each
    rank judges from its own host's count: with uneven hosts a rank on a host
    of exactly size() / cross_size() ranks also says True. False before
    init(), as Horovod's."""
    if not is_initialized():
        return False
    try:
        return size() == local_size() * cross_size()
    except NotInitializedError:  # shut down in between
        return False


def library_version() -> str:
    """Version string of the loaded libtutti, e.g. "0.1.0"."""
    return _library.load().tutti_version(None, None, None).decode()


_atexit_registered = False


def _register_atexit() -> None:
    # Leave the job cleanly when the interpreter exits without shutdown().
    global _atexit_registered
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(lambda: _library.load().tutti_shutdown())

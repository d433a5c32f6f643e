"""Lifecycle and placement: framework-independent functions over the C API.

Thread-safety: every function may be called from any thread. init() and
shutdown() serialise with each other inside libtutti.
"""

import atexit
import os

from tutti import _library
from tutti.errors import NotInitializedError


def init():
    """Joins the job described by the TUTTI_* environment variables.

    Blocks until every rank connected (at most TUTTI_TIMEOUT_SECONDS). Calling
    it again while initialised does nothing; after shutdown() it starts anew.
    Raises InvalidArgumentError for a bad setting (naming the variable and the
    accepted range), WaitTimeoutError naming ranks that never arrived, TuttiIOError.
    """
    lib = _library.load()
    _library.check(lib.tutti_init())
    _register_atexit()


def shutdown():
    """Completes pending ops with ShutdownError and leaves the job. Idempotent."""
    _library.check(_library.load().tutti_shutdown())


def is_initialized():
    """True between init() and shutdown()."""
    return bool(_library.load().tutti_is_initialized())


def _placement(fn_name):
    value = getattr(_library.load(), fn_name)()
    if value < 0:
        raise NotInitializedError(_library.last_error(), 7)
    return value


def rank():
    """Rank of this process in the job, 0..size()-1. Raises NotInitializedError."""
    return _placement("tutti_rank")


def size():
    """Number of ranks in the job. Raises NotInitializedError."""
    return _placement("tutti_size")


def local_rank():
    """Rank among the ranks on this host. Raises NotInitializedError."""
    return _placement("tutti_local_rank")


def local_size():
    """Number of ranks on this host. Raises NotInitializedError."""
    return _placement("tutti_local_size")


def cross_rank():
    """Index of this host among the job's hosts. Raises NotInitializedError."""
    return _placement("tutti_cross_rank")


def cross_size():
    """Number of hosts in the job. Raises NotInitializedError."""
    return _placement("tutti_cross_size")


def start_timeline(file_path, mark_cycles=False):
    """Starts recording a Chrome-trace timeline (docs/timeline.md), as Horovod's.

    Call it on every rank. Each rank writes its own file: file_path with
    ".rank<R>" inserted before the extension ("timeline.json" ->
    "timeline.rank0.json"). mark_cycles also marks every background round.
    Raises InvalidArgumentError (empty path, or a timeline is already
    recording), TuttiIOError (the file cannot be created), NotInitializedError.
    """
    _library.check(_library.load().tutti_start_timeline(os.fsencode(file_path),
                                                        1 if mark_cycles else 0))


def stop_timeline():
    """Writes the queued events and closes the timeline file (complete JSON).

    Does nothing when no timeline is recording; shutdown() stops it too.
    """
    _library.check(_library.load().tutti_stop_timeline())


def built_with(feature):
    """True when libtutti has `feature`: "tcp", "mpi", "nccl" or "cuda"."""
    return bool(_library.load().tutti_built_with(feature.encode()))


def tcp_built():
    return built_with("tcp")


def mpi_built():
    return built_with("mpi")


def nccl_built():
    return built_with("nccl")


def cuda_built():
    return built_with("cuda")


def library_version():
    """Version string of the loaded libtutti, e.g. "0.1.0"."""
    return _library.load().tutti_version(None, None, None).decode()


_atexit_registered = False


def _register_atexit():
    # Leave the job cleanly when the interpreter exits without shutdown().
    global _atexit_registered
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(lambda: _library.load().tutti_shutdown())

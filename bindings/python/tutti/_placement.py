"""Queries of the running job: is_initialized() and this process's placement
(rank, size, local and cross rank and size), over the C API.

The low layer of the framework-independent modules: tutti.process_sets and
tutti.basics (which re-exports them) sit on it. Thread-safety: every function
may be called from any thread.
"""

from tutti import _library
from tutti.errors import NotInitializedError


def is_initialized() -> bool:
    """True between init() and shutdown()."""
    return bool(_library.load().tutti_is_initialized())


def _placement(fn_name: str) -> int:
    value = getattr(_library.load(), fn_name)()
    if value < 0:
        raise NotInitializedError(_library.last_error(), 7)
    return value


def rank() -> int:
    """Rank of this process in the job, 0..size()-1. Raises NotInitializedError."""
    return _placement("tutti_rank")


def size() -> int:
    """Number of ranks in the job. Raises NotInitializedError."""
    return _placement("tutti_size")


def local_rank() -> int:
    """Rank among the ranks on this host. Raises NotInitializedError."""
    return _placement("tutti_local_rank")


def local_size() -> int:
    """Number of ranks on this host. Raises NotInitializedError."""
    return _placement("tutti_local_size")


def cross_rank() -> int:
    """Index of this host among the job's hosts. Raises NotInitializedError."""
    return _placement("tutti_cross_rank")


def cross_size() -> int:
    """Number of hosts in the job. Raises NotInitializedError."""
    return _placement("tutti_cross_size")

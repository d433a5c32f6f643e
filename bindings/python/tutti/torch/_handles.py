"""The handles of tutti.torch's ops: the registry of ops in flight, and
waiting for libtutti's C handles (poll, synchronize, c_handles_of).

A handle (an int: the op's first C handle) maps to a Pending: its C handles
(one; several for a grouped op), the tensors it borrows (kept referenced until
synchronize() returns) and finish(c_handles), which builds the result once
every C handle succeeded.

The wait is sliced (WAIT_SLICE_SECONDS per tutti_wait call) so that Ctrl-C
reaches Python between slices. A slice that expires is never the op's result:
once tutti_poll says the op completed, a wait with timeout 0 fetches its real
status (TUTTI_OK or the op's error), so an op that completes between a
slice's expiry and the poll is reported as what it is.

Thread-safety: every function may be called from any thread.
"""

import ctypes
import threading
from typing import Any, Callable, Dict, List, Tuple

from tutti import _library
from tutti.errors import InvalidArgumentError, error_for

STATUS_SHUTDOWN = 4
STATUS_TIMEOUT = 5
STATUS_NOT_INITIALIZED = 7

# Seconds per tutti_wait call. A module attribute so that tests can make it
# tiny (every slice then expires) to exercise the slice boundary.
WAIT_SLICE_SECONDS = 1.0


class Pending:
    """What an in-flight op needs: its C handles, the tensors it borrows, and
    finish(c_handles) that builds the result once every C handle succeeded."""

    __slots__ = ("c_handles", "tensors", "finish")

    def __init__(self, c_handles: List[int], tensors: object,
                 finish: Callable[[List[int]], Any]) -> None:
        self.c_handles = c_handles
        self.tensors = tensors
        self.finish = finish


_lock = threading.Lock()
_pending: Dict[int, Pending] = {}  # handle (the first C handle) -> Pending


def register(c_handles: List[int], tensors: object, finish: Callable[[List[int]], Any]) -> int:
    """Records an op just enqueued; returns its handle (its first C handle)."""
    with _lock:
        _pending[c_handles[0]] = Pending(c_handles, tensors, finish)
    return c_handles[0]


def forget_all() -> None:
    """Drops every op in flight without waiting (their C handles died with the
    runtime: tutti.torch.elastic's move to a new generation)."""
    with _lock:
        _pending.clear()


def _lookup(handle: int) -> Pending:
    with _lock:
        pending = _pending.get(handle)
    if pending is None:
        raise InvalidArgumentError("unknown handle %r (already synchronized?)" % (handle,), 1)
    return pending


def _status_until_done(lib: Any, c_handle: int) -> int:
    """The op's final tutti_status (a wait that expired is never returned)."""
    while True:
        rc = lib.tutti_wait(c_handle, WAIT_SLICE_SECONDS)
        if rc != STATUS_TIMEOUT:
            return rc
        done = lib.tutti_poll(c_handle)
        if done == 1:
            # Completed after the slice expired: its real status. (No loop on
            # TIMEOUT here: a completed op's status is final, whatever it is.)
            return lib.tutti_wait(c_handle, 0.0)
        if done < 0:
            return -done  # unknown handle, or no runtime any more


def wait(lib: Any, c_handle: int) -> Tuple[int, str]:
    """Waits for one C handle; returns (status, message), (0, "") on success."""
    rc = _status_until_done(lib, c_handle)
    if rc == 0:
        return 0, ""
    if rc == STATUS_NOT_INITIALIZED:
        # The runtime was shut down (and its handles forgotten) while this op
        # was pending: that is the op's shutdown error.
        return STATUS_SHUTDOWN, "tutti was shut down while this op was pending"
    status = ctypes.c_int()
    size = lib.tutti_handle_message(c_handle, ctypes.byref(status), None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    lib.tutti_handle_message(c_handle, ctypes.byref(status), buf, size + 1)
    message = buf.value.decode("utf-8", "replace") or _library.last_error()
    return rc, message


def poll(handle: int) -> bool:
    """True once the op of `handle` completed (successfully or not). Never blocks.
    Raises InvalidArgumentError for an unknown handle."""
    pending = _lookup(handle)
    lib = _library.load()
    for h in pending.c_handles:
        rc = lib.tutti_poll(h)
        if rc < 0:
            raise error_for(-rc, _library.last_error())
        if rc == 0:
            return False
    return True


def c_handles_of(handle: int) -> List[int]:
    """The libtutti C handles of `handle` (one; several for a grouped op), for
    waiting on them in other ways (tutti.torch.distributed's completion
    callbacks) before synchronize(handle). InvalidArgumentError when unknown."""
    return _lookup(handle).c_handles


def synchronize(handle: int) -> Any:
    """Waits for the op of `handle` and returns its result (the output tensor,
    the in-place tensor, a list for grouped ops, (output, splits) for
    alltoall_async). Releases the handle. Raises the op's TuttiError (e.g.
    MismatchError, PeerLostError) with the core's message."""
    pending = _lookup(handle)
    lib = _library.load()
    error = None
    for h in pending.c_handles:  # wait for all before releasing any
        rc, message = wait(lib, h)
        if rc != 0 and error is None:
            error = error_for(rc, message)
    with _lock:
        _pending.pop(handle, None)
    try:
        if error is not None:
            raise error
        return pending.finish(pending.c_handles)
    finally:
        for h in pending.c_handles:
            lib.tutti_release(h)

"""The Work objects of backend "tutti" and how torch's callers see them.

FutureWork is a torch Work over one op (an OpCompletion, or a recv from any
source: _anysource.PendingRecv) that answers like gloo's: wait() runs the op
on the waiting thread and raises its error, wait(timeout) raises once the
timeout passed (the op goes on), is_completed(), is_success() and
exception() answer from the op, get_future() is the op's torch future (its
value the op's output tensors), and a recv's _source_rank() is the sender's
group rank.

torch 1.x calls the group's Python methods directly and gets the FutureWork
itself. torch 2.x wraps a Python Backend in its own ProcessGroup, which hands
its callers a C++ holder forwarding only wait() and get_future(), so
is_completed() stayed False and _source_rank() raised. see_through_works()
therefore wraps the Python methods of torch's ProcessGroup that return a
Work: when the call reached a tutti backend, which hands its FutureWork over
on the calling thread (hand_over), the caller gets that FutureWork; calls on
other backends and C++ callers (DDP's reducer, functional collectives) are
unchanged.
"""

import threading
from typing import Any, Callable, List, Optional

import torch.distributed as dist

# .slot: while a wrapped ProcessGroup method runs on this thread, the list
# hand_over appends the backend's FutureWork to (None otherwise: nothing kept)
_handed = threading.local()


class FutureWork(dist.Work):
    """A Work over one op (see the module docstring). completion: an
    OpCompletion-like object (run_here, done, future); source: for a recv,
    the sender's group rank or a callable returning it (None: not a recv)."""

    def __init__(self, completion: Any, source: Any = None) -> None:
        super().__init__()
        self._completion = completion
        self._source = source

    def wait(self, timeout: Any = None) -> bool:
        """Waits for the op and raises its error. timeout: a
        datetime.timedelta or seconds (None or <= 0: no limit); past it,
        RuntimeError naming the timeout (the op goes on; tutti's own
        deadlines end it)."""
        seconds = _seconds(timeout)
        if seconds is not None and seconds > 0 and not self._completion.done():
            done = threading.Event()
            self._completion.future().add_done_callback(lambda _: done.set())
            if not done.wait(seconds):
                raise RuntimeError("tutti backend: Work.wait(timeout=%.3f s) timed out; the op "
                                   "has not completed" % seconds)
        self._completion.run_here()  # raises the op's error
        return True

    def get_future(self) -> Any:
        return self._completion.future()

    def is_completed(self) -> bool:
        return bool(self._completion.done())

    def is_success(self) -> bool:
        return self._completion.done() and self.exception() is None

    def exception(self) -> Optional[BaseException]:
        """The op's error once it failed (torch's Work.exception()), else None."""
        if not self._completion.done():
            return None
        try:
            self._completion.run_here()
        except Exception as e:  # noqa: BLE001 (failed: that is the answer)
            return e
        return None

    def result(self) -> Any:
        return self._completion.run_here()

    def synchronize(self) -> None:
        self._completion.run_here()

    def _source_rank(self) -> int:
        """A recv's sender (group rank), as gloo's recv works answer; waits
        for a recv from any source to be matched. RuntimeError for other ops."""
        if self._source is None:
            raise RuntimeError("tutti backend: _source_rank() is only defined for the work of a "
                               "recv or a recv from any source (as in gloo)")
        return int(self._source() if callable(self._source) else self._source)

    def source_rank(self) -> int:
        return self._source_rank()


def _seconds(timeout: Any) -> Optional[float]:
    """Work.wait's timeout in seconds (None or <= 0: no limit)."""
    if timeout is None:
        return None
    if hasattr(timeout, "total_seconds"):
        return float(timeout.total_seconds())
    return float(timeout)


def hand_over(work: FutureWork) -> FutureWork:
    """Returns work, and gives it to the wrapped ProcessGroup method running
    on this thread, if any (C++ callers such as DDP's reducer have none)."""
    slot = getattr(_handed, "slot", None)
    if slot is not None:
        slot.append(work)
    return work


# torch 2.x's ProcessGroup methods that return a Work (and reach the backend)
_WORK_METHODS = ("allreduce", "allreduce_coalesced", "reduce", "allgather", "_allgather_base",
                 "allgather_coalesced", "allgather_into_tensor_coalesced", "gather", "scatter",
                 "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced",
                 "alltoall_base", "alltoall", "barrier", "send", "recv", "recv_anysource")


def _see_through(method: Callable[..., Any]) -> Callable[..., Any]:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(_handed, "slot", None)  # a wrapped call further up this thread
        slot: List[FutureWork] = []
        _handed.slot = slot
        try:
            result = method(self, *args, **kwargs)
        finally:
            _handed.slot = outer
        return slot[-1] if slot and result is not None else result

    call._tutti_hooked = True  # type: ignore[attr-defined]
    call.__wrapped__ = method  # type: ignore[attr-defined]
    call.__name__ = getattr(method, "__name__", "call")
    call.__doc__ = getattr(method, "__doc__", None)
    return call


def see_through_works() -> None:
    """Wraps the Work-returning methods of torch's ProcessGroup (torch 2.x;
    see the module docstring). Idempotent."""
    group = dist.ProcessGroup
    for name in _WORK_METHODS:
        method = getattr(group, name, None)
        if method is not None and not getattr(method, "_tutti_hooked", False):
            setattr(group, name, _see_through(method))

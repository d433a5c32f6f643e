"""Completing the torch futures of tutti ops without deadlocks.

Each op of the process group returns a torch.futures.Future. Waiting for the
tutti handle and completing the future happens on a worker thread; callbacks
attached with fut.then() run on that thread when the future completes. Such a
callback may itself start a collective and wait for it (torch's PowerSGD hook
does), so one completing thread is not enough: it would wait for a future only
it could complete. The pool here therefore never queues work behind a busy
thread: a task goes to an idle worker, or to a new one when all are busy.
Idle workers exit after IDLE_SECONDS.

Thread-safety: submit() may be called from any thread.
"""

import queue
import threading

IDLE_SECONDS = 30.0


class GrowingPool:
    """Runs each submitted function at once on an idle or a new daemon thread."""

    def __init__(self, name):
        self._name = name
        self._lock = threading.Lock()
        self._idle = []  # queues of the workers waiting for work
        self._count = 0

    def submit(self, fn):
        with self._lock:
            if self._idle:
                self._idle.pop().put(fn)
                return
            self._count += 1
            index = self._count
        threading.Thread(target=self._work, args=(fn,), daemon=True,
                         name="%s-%d" % (self._name, index)).start()

    def _work(self, fn):
        inbox = queue.SimpleQueue()
        while True:
            fn()
            fn = None
            with self._lock:
                self._idle.append(inbox)
            try:
                fn = inbox.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:  # nobody handed it work meanwhile
                        self._idle.remove(inbox)
                        self._count -= 1
                        return
                fn = inbox.get()  # submit() took this inbox just before the timeout


class _Failed:
    """The value of a raw future whose op failed: the error to raise."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def _unwrap(raw):
    value = raw.value()
    if isinstance(value, _Failed):
        raise value.error
    return value


def complete_later(pool, wait, finish, devices=None):
    """A torch future completed on a pool thread with finish(wait()), or with
    an error when either raises. The error is a real error of the C++ future
    (wait() raises it in Python and C++ alike): torch's Python
    Future.set_exception only stores the exception as the value, which C++
    callers such as DDP's reducer would read as a result. So the raw future
    gets the value, and the future returned is raw.then(unwrap), which fails
    when unwrap raises. devices: CUDA devices of the tensors (None: CPU)."""
    import torch

    raw = torch.futures.Future(devices=devices)

    def run():
        try:
            value = finish(wait())
        except BaseException as error:  # noqa: B902 (delivered to the waiter)
            value = _Failed(error)
        raw.set_result(value)

    future = raw.then(_unwrap)
    pool.submit(run)
    return future

"""Completing the torch futures of tutti ops: no thread per op, no deadlocks.

Each op of the process group (and of the DDP hook) returns a
torch.futures.Future. libtutti tells when an op's C handle completed by
writing a 16-byte record (handle, status) into a pipe of this process
(tutti_handle_on_complete with tutti_completion_write_fd, bindings/c/tutti.h):
no Python code runs on tutti's background thread, and no thread blocks in
tutti_wait per op. The threads of a Completer take turns reading that pipe
(leader/follower): one reads one record, then runs that op's completion
(fetching the result, set_result on the future).

Callbacks attached with fut.then() run on the thread that completes the
future, and such a callback may itself start a collective and wait for it
(torch's PowerSGD hook does). So a thread that runs a completion must never
be the only one that could read the next record, nor hold other records:
each turn takes one record, and before running it the reader hands the
reading to an idle thread (or a new one) whenever other handles are still
watched; watch() wakes or starts a reader when none is reading. Every
watched handle therefore always has a reader, whatever the callbacks block
on. Idle threads exit after IDLE_SECONDS; the threads are daemons.

At exit (atexit, before the interpreter finalizes) tutti is shut down and
the completion threads drain: see _quiesce_at_exit.

Thread-safety: watch() and complete_later() may be called from any thread.
"""

import atexit
import ctypes
import os
import struct
import sys
import threading
from typing import Any, Optional, Tuple

from tutti import _library

IDLE_SECONDS = 30.0
_RECORD = struct.Struct("=qii")  # tutti_completion_record: handle, status, reserved
# One record per turn: a thread runs one completion at a time, so that a
# callback that blocks holds up no other op's completion (a batch read by one
# thread would wait behind it: e.g. the completion that frees the name the
# blocked callback's new op waits for).
_READ_BYTES = _RECORD.size


def _write_fd_callback():
    """The address of libtutti's tutti_completion_write_fd."""
    return ctypes.cast(_library.load().tutti_completion_write_fd, ctypes.c_void_p).value


class Completer:
    """Runs fn(status) on one of its threads once a watched C handle completed.

    The right to read the pipe is a token held by at most one thread: the
    reader. After reading, the reader passes the token on (to an idle thread,
    or a new one) when handles are still watched, else leaves it free; watch()
    passes a free token on. A thread back from running completions takes a
    free token itself, else waits idle to be handed one."""

    def __init__(self, name):
        self._name = name
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a child has none of the threads

    def _reset(self):
        self._cond = threading.Condition()  # new in a fork child: another thread may hold it
        self._watched = {}  # C handle -> fn(status)
        self._token_free = True  # no thread reads or is about to
        self._handoffs = 0  # tokens handed to idle threads, not yet taken
        self._idle = 0  # threads waiting for a token
        self._count = 0
        self._fds = None
        self._callback = None
        self._rest = b""  # bytes of a partial record (only the token holder touches it)
        self._running = 0  # threads running completions now

    def watch(self, c_handle, fn):
        """Runs fn(status) on a completion thread once C handle c_handle completed
        (status: its tutti_status, 0 for success). Raises the C API's error (e.g.
        NotInitializedError) when the handle cannot be watched; fn never runs then."""
        with self._cond:
            if self._fds is None:
                self._fds = os.pipe()
                self._callback = _write_fd_callback()
            self._watched[c_handle] = fn
            if self._token_free:
                self._pass_token()
            write_fd, callback = self._fds[1], self._callback
        rc = _library.function("tutti_handle_on_complete")(c_handle, callback, write_fd)
        if rc != 0:
            with self._cond:
                self._watched.pop(c_handle, None)
            _library.check(rc)

    def _pass_token(self):  # requires self._cond; the caller holds or frees the token
        self._token_free = False
        if self._idle > self._handoffs:
            self._handoffs += 1
            self._cond.notify()
        else:
            self._count += 1
            threading.Thread(target=self._work, daemon=True,
                             name="%s-%d" % (self._name, self._count)).start()

    def _work(self):
        while True:
            for fn, status in self._read():
                try:
                    fn(status)
                except BaseException:  # noqa: B902 (fn delivers its errors itself)
                    pass
            with self._cond:
                self._running -= 1
                self._cond.notify_all()
            if not self._await_token():
                return

    def drain(self, timeout_seconds):
        """Waits until no handle is watched and no completion runs (at most
        timeout_seconds). Returns True when drained."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._watched and not self._running,
                                       timeout_seconds)

    def in_use(self):
        return self._fds is not None

    def _await_token(self):
        """True once this thread holds the token; False after IDLE_SECONDS idle."""
        with self._cond:
            if self._token_free:
                self._token_free = False
                return True
            self._idle += 1
            try:
                while not self._handoffs:
                    if not self._cond.wait(IDLE_SECONDS) and not self._handoffs:
                        self._count -= 1
                        return False
                self._handoffs -= 1
                return True
            finally:
                self._idle -= 1

    def _read(self):
        """Reads completed records (this thread holds the token), passes the
        token on, and returns [(fn, status)] to run."""
        # Blocks with the GIL released. Records are written whole (16 bytes <
        # PIPE_BUF), so a read of one record gets it whole; a partial one
        # would be kept for the next reader anyway.
        data = self._rest + os.read(self._fds[0], _READ_BYTES)
        whole = len(data) - len(data) % _RECORD.size
        self._rest = data[whole:]
        with self._cond:
            done = [(self._watched.pop(h, None), status)
                    for h, status, _ in _RECORD.iter_unpack(data[:whole])]
            self._running += 1  # until _work has run them
            if self._watched:  # others still wait: someone must read while we run these
                self._pass_token()
            else:
                self._token_free = True
        return [(fn, status) for fn, status in done if fn is not None]


COMPLETER = Completer("tutti-completion")  # shared by the process groups and the DDP hook

DRAIN_SECONDS = 10.0


def _quiesce_at_exit(completer=COMPLETER):
    """Before the interpreter finalizes: shut tutti down (every pending op
    completes, with ShutdownError if it must) and let the completion threads
    finish running those completions. A daemon thread still completing a
    future when Python finalizes is stopped by pthread_exit inside torch's C++
    (the future's callbacks need the GIL), and that forced unwind through C++
    frames aborted the process ("terminate called without an active
    exception"). tutti_shutdown is idempotent; tutti.basics' own exit handler
    calls it too."""
    if not completer.in_use():
        return
    _library.load().tutti_shutdown()
    completer.drain(DRAIN_SECONDS)


atexit.register(_quiesce_at_exit)


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


def complete_later(c_handles, wait, finish, devices=None, completer=COMPLETER):
    """A torch future completed with finish(wait()) on a completer thread once
    every C handle in c_handles completed (wait() then returns at once), or
    with an error when either raises. The error is a real error of the C++
    future (wait() raises it in Python and C++ alike): torch's Python
    Future.set_exception only stores the exception as the value, which C++
    callers such as DDP's reducer would read as a result. So the raw future
    gets the value, and the future returned is raw.then(unwrap), which fails
    when unwrap raises. devices: CUDA devices of the tensors (None: CPU).
    wait() and finish() run in the caller's inference mode: a collective
    started under torch.inference_mode() (Lightning's test loop) writes
    inference tensors, which only code in that mode may change."""
    import torch

    raw = torch.futures.Future(devices=devices)
    inference = torch.is_inference_mode_enabled()

    def run(status=0):
        del status  # wait() reports the op's error with its message
        try:
            with torch.inference_mode(inference):
                value = finish(wait())
        except BaseException as error:  # noqa: B902 (delivered to the waiter)
            value = _Failed(error)
        raw.set_result(value)

    future = raw.then(_unwrap)
    if len(c_handles) == 1:
        completer.watch(c_handles[0], run)
        return future
    left = [len(c_handles)]
    lock = threading.Lock()

    def one_done(status):
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            run()

    for h in c_handles:
        completer.watch(h, one_done)
    return future


class OpCompletion:
    """One op of the process group, finished on whichever thread comes first:
    a thread that waits for it (run_here(): Work.wait(), a blocking
    dist.all_reduce) runs finish(wait()) itself, and with the ordered lane
    the collective too (tutti_wait runs it on the waiting thread: no
    hand-off to tutti's threads or to a completer thread); a torch future is
    made only when one is asked for (future(): DDP's reducer, comm hooks,
    get_future()), and then a completer thread finishes the op if nobody
    waits. finish runs once either way. Thread-safe."""

    __slots__ = ("_c_handles", "_wait", "_finish", "_devices", "_completer", "_lock", "_done",
                 "_value", "_raw", "_future", "_inference")

    def __init__(self, c_handles, wait, finish, devices=None, completer=COMPLETER):
        import torch

        self._c_handles = c_handles
        self._wait = wait
        self._finish = finish
        self._devices = devices
        self._completer = completer
        self._lock = threading.Lock()
        self._done = False
        self._value = None
        self._raw = None
        self._future = None
        self._inference = torch.is_inference_mode_enabled()

    def _compute(self):  # requires self._lock
        import torch

        if self._done:
            return
        try:
            if self._inference:
                with torch.inference_mode(True):
                    self._value = self._finish(self._wait())
            else:  # no mode to enter: saves a context manager per op
                self._value = self._finish(self._wait())
        except BaseException as error:  # noqa: B902 (delivered to the waiter)
            self._value = _Failed(error)
        self._done = True
        if self._raw is not None:
            self._raw.set_result(self._value)

    def run_here(self):
        """Finishes the op on this thread (waiting for it) and returns its
        value; raises its error as the op's future would: a RuntimeError
        whose message starts with the error's class ("MismatchError: ...").
        Once a future was made, its callbacks run on the completer's threads
        only (the op's completion is left to them; this waits for it)."""
        with self._lock:
            future = self._future
            if future is None:
                self._compute()
                value = self._value
        if future is not None:
            return future.wait()
        if isinstance(value, _Failed):
            error = value.error
            raise RuntimeError("%s: %s" % (type(error).__name__, error)) from error
        return value

    def done(self):
        """True once finished, or when every C handle completed (then it is
        finished here, which no longer waits)."""
        if self._done:
            return True
        lib = _library.load()
        if all(lib.tutti_poll(h) == 1 for h in self._c_handles):
            with self._lock:
                self._compute()
        return self._done

    def future(self):
        """The op's torch future (made on first use; completed by a completer
        thread unless a waiter finishes the op first)."""
        import torch

        with self._lock:
            if self._future is not None:
                return self._future
            self._raw = torch.futures.Future(devices=self._devices)
            self._future = self._raw.then(_unwrap)
            if self._done:
                self._raw.set_result(self._value)
                return self._future
        left = [len(self._c_handles)]

        def one_done(status):
            del status
            with self._lock:
                left[0] -= 1
                if left[0] == 0:
                    self._compute()

        for h in self._c_handles:
            self._completer.watch(h, one_done)
        return self._future


_CALLBACK_FRAMES: Optional[Tuple[Any, ...]] = None
_CALLBACK_FRAMES_LOCK = threading.Lock()


def _attach_through_python(callback_attacher):
    """A Python function in place of torch._C.Future's then/add_done_callback
    (pybind methods): a callback torch runs at once, inside the call,
    because the future had completed already, then has a Python frame below
    it that in_future_callback() finds. torch.futures.Future's methods call
    these too (super().then). Behaviour is the original's; C++ callers never
    see the attribute."""

    def attach(self, callback):
        return callback_attacher(self, callback)

    attach.tutti_original = callback_attacher  # type: ignore[attr-defined]
    return attach


def _callback_frames():
    """(code of the attach wrapper, code of OpCompletion._compute): the frames
    that mark a torch future's callback, installed once per process."""
    global _CALLBACK_FRAMES
    with _CALLBACK_FRAMES_LOCK:
        if _CALLBACK_FRAMES is None:
            import torch

            base = torch._C.Future
            for name in ("then", "add_done_callback"):
                method = getattr(base, name)
                if not hasattr(method, "tutti_original"):
                    setattr(base, name, _attach_through_python(method))
            _CALLBACK_FRAMES = (base.then.__code__, OpCompletion._compute.__code__)
        return _CALLBACK_FRAMES


def in_future_callback():
    """True when the calling code runs inside a torch future's callback
    (fut.then / add_done_callback: DDP comm hooks such as PowerSGD), on
    whichever thread runs it: a completion thread (the callback runs inside
    the op's completion, OpCompletion._compute) or the thread that attached
    it to a future that had completed already (torch then runs it at once,
    inside the attach call, which _attach_through_python makes a Python
    frame). Collectives started there come in an order that may differ
    across ranks; the answer is the same on every rank for the same call,
    whichever thread ran it."""
    attach, compute = _CALLBACK_FRAMES or _callback_frames()
    frame = sys._getframe(1)
    while frame is not None:  # the whole stack: autograd's and DDP's are deep
        # Compared by identity: under torch.compile a frame's f_code may be
        # an object that cannot be hashed.
        code = frame.f_code
        if code is attach or code is compute:
            return True
        frame = frame.f_back
    return False


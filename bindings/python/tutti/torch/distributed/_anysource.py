"""recv from any source (torch's recv/irecv without src) on backend "tutti".

tutti matches a message by its sender, receiver, tag and number (the n-th
send from s to d with tag t meets the n-th recv on d from s with tag t:
tutti_p2p.h), and has no wildcard. So the senders count their messages in
the group's torch store: the counter "tutti/p2p/<d>/<t>/<s>" holds how many
messages group rank s handed to tutti for d with tag t, written by a daemon
thread of s (the latest count of each counter, so that a send does not wait
for the store). The receiver
counts, per (tag, sender), the messages its recvs took: a recv from s takes
one at once; a recv from any source waits until some sender's counter is
past what was taken from it, takes that sender's next message (a tutti recv
from it) and reports it as the sender (work._source_rank(), recv's return).

Order. Recvs from any source with one tag are matched in posting order, each
to the first sender (scanning from the one after the last chosen, round
robin) with a message not yet taken; a recv from s posted meanwhile takes
s's next message first. A message between a pair with one tag never
overtakes another (tutti's rule), whichever form of recv takes it.

Cost: a store write per send (or fewer: a counter written once for the
sends made meanwhile) on the sender's daemon thread, not on the sending
one; while a recv from any source waits, one store read per other rank every
POLL_SECONDS at most (a daemon thread polls; it exits when none waits).
Needs the group's store (RuntimeError naming it otherwise).

At exit (atexit, before the interpreter finalizes) both threads stop: a
daemon thread still inside a store call when Python finalizes would be
unwound through torch's C++ frames (an abort; see _completion._quiesce_at_exit).
"""

import atexit
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional, Tuple

from tutti.torch.distributed._completion import _Failed, _unwrap

POLL_SECONDS = 0.01  # the longest pause between two polls of the counters
_FIRST_POLL_SECONDS = 0.0005
_EXIT_JOIN_SECONDS = 2.0
_EXITING = threading.Event()
_LIVE: "weakref.WeakSet[AnySource]" = weakref.WeakSet()  # groups whose threads may run


def _key(dst: int, tag: int, src: int) -> str:
    return "tutti/p2p/%d/%d/%d" % (dst, tag, src)


class PendingRecv:
    """A recv from any source until it is matched, then its tutti recv (an
    OpCompletion): run_here(), done() and future() as OpCompletion's, and
    source() the sender's group rank (waits until matched). Thread-safe."""

    def __init__(self) -> None:
        self._matched = threading.Event()
        self._lock = threading.Lock()
        self._source: Optional[int] = None
        self._inner: Any = None  # the OpCompletion of the tutti recv
        self._error: Optional[BaseException] = None  # posting the recv failed
        self._raw: Any = None
        self._future: Any = None

    def match(self, source: int, inner: Any = None, error: Optional[BaseException] = None
              ) -> None:
        """Called once: the sender, and the tutti recv's OpCompletion or the error
        posting it raised."""
        with self._lock:
            self._source, self._inner, self._error = source, inner, error
            self._matched.set()
            chain = self._raw is not None
        if chain:
            self._chain()

    def _chain(self) -> None:
        if self._error is not None:
            self._raw.set_result(_Failed(self._error))
            return
        raw = self._raw

        def copy(fut: Any) -> None:
            try:
                value = fut.value()
            except BaseException as e:  # noqa: B902 (delivered to the waiter)
                value = _Failed(e)
            raw.set_result(value)

        self._inner.future().add_done_callback(copy)

    def source(self) -> int:
        self._matched.wait()
        assert self._source is not None
        return self._source

    def run_here(self) -> Any:
        self._matched.wait()
        if self._error is not None:
            error = self._error
            raise RuntimeError("%s: %s" % (type(error).__name__, error)) from error
        return self._inner.run_here()

    def done(self) -> bool:
        if not self._matched.is_set():
            return False
        return self._error is not None or bool(self._inner.done())

    def future(self) -> Any:
        import torch

        with self._lock:
            if self._future is not None:
                return self._future
            self._raw = torch.futures.Future()
            self._future = self._raw.then(_unwrap)
            matched = self._matched.is_set()
        if matched:
            self._chain()
        return self._future


class AnySource:
    """The counters of one group (see the module docstring). store: the
    group's torch store (None: recv from any source raises); rank, size:
    this rank in the group and its size."""

    def __init__(self, store: Any, rank: int, size: int) -> None:
        self._store = store
        self._rank = rank
        self._size = size
        self._lock = threading.Lock()
        self._taken: Dict[Tuple[int, int], int] = {}  # (tag, src) -> messages taken
        self._waiting: Dict[int, Deque[Tuple[PendingRecv, Callable[[int], Any]]]] = {}
        self._next = 0  # where the next scan for a sender starts
        self._poller: Optional[threading.Thread] = None
        self._sent_cond = threading.Condition()  # guards the sender's side:
        self._sent: Dict[str, int] = {}  # counter key -> messages sent
        self._unwritten: Dict[str, int] = {}  # counter key -> count not yet in the store
        self._writer: Optional[threading.Thread] = None
        _LIVE.add(self)

    def sent(self, dst: int, tag: int) -> None:
        """Counts a message this rank handed to tutti for group rank dst; the
        count reaches the store from the writer thread."""
        if self._store is None:
            return
        key = _key(dst, tag, self._rank)
        with self._sent_cond:
            self._sent[key] = self._sent.get(key, 0) + 1
            self._unwritten[key] = self._sent[key]
            if self._writer is None:
                self._writer = threading.Thread(target=self._write, daemon=True,
                                                name="tutti-p2p-counts")
                self._writer.start()
            self._sent_cond.notify()

    def _write(self) -> None:
        while True:
            with self._sent_cond:
                self._sent_cond.wait_for(lambda: bool(self._unwritten) or _EXITING.is_set())
                if _EXITING.is_set():
                    return
                counts, self._unwritten = self._unwritten, {}
            for key, count in counts.items():
                self._store.set(key, str(count))  # read with add(key, 0)

    def stop(self) -> None:
        """At exit: wakes this group's threads (they return) and waits for them."""
        with self._sent_cond:
            self._sent_cond.notify_all()
        for thread in (self._writer, self._poller):
            if thread is not None and thread is not threading.current_thread():
                thread.join(_EXIT_JOIN_SECONDS)

    def taking(self, src: int, tag: int) -> None:
        """A recv from group rank src with tag was posted: it takes src's next message."""
        with self._lock:
            self._taken[(tag, src)] = self._taken.get((tag, src), 0) + 1

    def recv(self, tag: int, post: Callable[[int], Any]) -> PendingRecv:
        """A recv from any source with tag: post(src) posts the tutti recv
        from group rank src once matched and returns its OpCompletion."""
        if self._store is None:
            raise RuntimeError("tutti backend: recv without src needs the group's store, which "
                               "torch did not pass when creating this group; pass src")
        pending = PendingRecv()
        with self._lock:
            self._waiting.setdefault(tag, deque()).append((pending, post))
            self._match(tag)
            if self._waiting.get(tag) and (self._poller is None or not self._poller.is_alive()):
                self._poller = threading.Thread(target=self._poll, daemon=True,
                                                name="tutti-recv-anysource")
                self._poller.start()
        return pending

    def _match(self, tag: int) -> None:  # requires self._lock
        """Matches the waiting recvs with tag, in posting order, while some
        sender has a message not yet taken."""
        queue = self._waiting.get(tag)
        while queue:
            src = self._sender_with_message(tag)
            if src is None:
                return
            pending, post = queue.popleft()
            self._taken[(tag, src)] = self._taken.get((tag, src), 0) + 1
            try:
                inner, error = post(src), None
            except Exception as e:  # noqa: BLE001 (the recv's error)
                inner, error = None, e
            pending.match(src, inner, error)
        self._waiting.pop(tag, None)

    def _sender_with_message(self, tag: int) -> Optional[int]:  # requires self._lock
        for i in range(self._size):
            src = (self._next + i) % self._size
            if src == self._rank:
                continue
            if self._store.add(_key(self._rank, tag, src), 0) > self._taken.get((tag, src), 0):
                self._next = src + 1
                return src
        return None

    def _poll(self) -> None:
        pause = _FIRST_POLL_SECONDS
        while not _EXITING.is_set():
            time.sleep(pause)
            pause = min(2 * pause, POLL_SECONDS)
            with self._lock:
                for tag in list(self._waiting):
                    self._match(tag)
                if not self._waiting:
                    self._poller = None
                    return


def _stop_at_exit() -> None:
    _EXITING.set()
    for group in list(_LIVE):
        group.stop()


atexit.register(_stop_at_exit)

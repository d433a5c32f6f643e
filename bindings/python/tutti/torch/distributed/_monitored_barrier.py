"""monitored_barrier for backend "tutti": gloo's debugging barrier, which
names the ranks that did not arrive, over the group's torch store.

Every rank but 0 counts itself in at an arrival key; rank 0 waits for each with the
timeout and then writes the release key every other rank waits for. Rank 0
raises "Rank r failed to pass monitoredBarrier in T ms" (gloo's sentence) for
the first rank missing, or with wait_all_ranks=True "Ranks r, s failed to
pass monitoredBarrier in T ms" for all of them; the others raise when rank 0
does not release them within the timeout. Keys are per call (a counter the
same on every rank, as calls are in the same order) under the group's store
prefix; rank 0 deletes the arrival keys it read.

Why the store and not tutti: tutti's barrier completes on all ranks or fails
on all ranks, and cannot say who is missing; the store answers per key.
Keys are counters, written with add(key, 1) and polled with add(key, 0)
every POLL_SECONDS, as torch's own store-based barrier does (every torch
store has add; torch 1.x's PrefixStore has no check()). Not store.wait():
one that times out leaves its request pending on torch 1.x's TCPStore,
whose late answer then desynchronises that client's next command.
"""

import datetime
import threading
import time

POLL_SECONDS = 0.01

_DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)  # torch's default process group timeout


class MonitoredBarrier:
    """store: the group's torch Store (None: monitored_barrier raises, naming
    why); rank, size: this rank in the group and the group's size."""

    def __init__(self, store, rank, size):
        self._store = store
        self._rank = rank
        self._size = size
        self._lock = threading.Lock()
        self._calls = 0

    def run(self, timeout=None, wait_all_ranks=False):
        """timeout: a datetime.timedelta, seconds, or torch's BarrierOptions
        (its .timeout); None: torch's default group timeout (30 min)."""
        if self._store is None:
            raise RuntimeError("tutti backend: monitored_barrier needs the group's store, which "
                               "torch did not pass when creating this group")
        timeout = getattr(timeout, "timeout", timeout)  # torch 2.x's C++ passes BarrierOptions
        timeout = timeout if timeout is not None else _DEFAULT_TIMEOUT
        if not isinstance(timeout, datetime.timedelta):
            timeout = datetime.timedelta(seconds=float(timeout))
        with self._lock:
            call = self._calls
            self._calls += 1
        prefix = "tutti/monitored_barrier/%d/" % call
        if self._rank == 0:
            self._collect(prefix, timeout, wait_all_ranks)
            self._store.add(prefix + "release", 1)
            return
        self._store.add(prefix + "arrived/%d" % self._rank, 1)
        deadline = time.monotonic() + timeout.total_seconds()
        if not _wait_key(self._store, prefix + "release", deadline):
            raise RuntimeError("tutti backend: monitored_barrier: rank 0 did not release rank %d "
                               "within %d ms (rank 0 names the ranks it missed)"
                               % (self._rank, _ms(timeout)))

    def _collect(self, prefix, timeout, wait_all_ranks):
        deadline = time.monotonic() + timeout.total_seconds()
        missing = []
        for r in range(1, self._size):
            key = prefix + "arrived/%d" % r
            if not _wait_key(self._store, key, deadline):
                missing.append(r)
                if not wait_all_ranks:
                    break
                continue
            _delete(self._store, key)
        if len(missing) == 1 and not wait_all_ranks:
            raise RuntimeError("Rank %d failed to pass monitoredBarrier in %d ms"
                               % (missing[0], _ms(timeout)))
        if missing:
            raise RuntimeError("Ranks %s failed to pass monitoredBarrier in %d ms"
                               % (", ".join(str(r) for r in missing), _ms(timeout)))


def _wait_key(store, key, deadline):
    """True once key exists in store, False at the deadline (time.monotonic())."""
    while store.add(key, 0) < 1:
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


def _ms(timeout):
    return int(timeout.total_seconds() * 1000)


def _delete(store, key):
    try:
        store.delete_key(key)
    except (RuntimeError, AttributeError):  # a store without deletion keeps the key
        pass

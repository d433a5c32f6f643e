"""Elastic training, the framework-independent part (docs/elastic.md).

A worker of an elastic job (started by ``tuttirun --min-np/--max-np/
--host-discovery-script``; TUTTI_ELASTIC_WORKER_ID set) keeps its training
state in memory in a State object. commit() saves it; when a peer is lost
(PeerLostError), run_fn() restores the last commit, leaves the current
membership generation, joins the next one (new rank and size), and syncs the
state from the new rank 0, which is always a surviving member. When hosts
are added or removed, commit() raises HostsUpdatedInterrupt on every rank at
once and run_fn() moves to the next generation without restoring.

This module holds the C API wrappers (enabled, generation, leave, join,
hosts_updated), State, ObjectState and run_fn; the framework bindings
(tutti.torch.elastic) add the framework's state handlers and its run().

Thread-safety: one training thread drives a State and run_fn; leave() and
join() must not race with collectives issued from other threads.
"""

import copy
import ctypes
import functools
import os

from tutti import _library
from tutti import process_sets as _process_sets
from tutti.errors import HostsUpdatedInterrupt, PeerLostError

_WORKER_ID_VARIABLE = "TUTTI_ELASTIC_WORKER_ID"


def enabled():
    """True when this process is a worker of an elastic job (tutti_elastic_enabled).

    With a libtutti that predates elastic training: False, unless
    TUTTI_ELASTIC_WORKER_ID is set, which raises NotImplementedError (the
    driver started an elastic worker that this library cannot serve).
    """
    if not _library.has_function("tutti_elastic_enabled") and _WORKER_ID_VARIABLE not in os.environ:
        return False
    return bool(_library.function("tutti_elastic_enabled")())


def generation():
    """The current membership generation (0, 1, ...); -1 when not initialised
    or not elastic (also with a libtutti that predates elastic training)."""
    if not _library.has_function("tutti_elastic_generation"):
        return -1
    # -1 from libtutti too when not initialised or not elastic: no need to
    # read the environment (enabled()) on every call, e.g. every gradient.
    return int(_library.function("tutti_elastic_generation")())


def leave():
    """Leaves the current generation: reports the lost rank (after a peer-lost
    error) to the driver, then shuts the runtime down as tutti.shutdown()
    does (pending ops complete with ShutdownError; every handle is
    forgotten). Raises TuttiError subclasses, NotImplementedError (old libtutti)."""
    _process_sets._forget_all()  # the next generation starts with the global set only
    _library.check(_library.function("tutti_elastic_leave")())


def join():
    """Joins the next generation (blocks until it is formed and every member
    connected, at most TUTTI_ELASTIC_TIMEOUT_SECONDS); rank() and size() then
    give the new placement. Raises ShutdownError with the driver's message
    when the driver gave up (below --min-np, reset limit), WaitTimeoutError,
    InvalidArgumentError (not an elastic job), NotImplementedError (old libtutti)."""
    _library.check(_library.function("tutti_elastic_join")())


def hosts_updated():
    """Collective over the current ranks (every rank calls it at the same
    point): True on every rank when any rank sees a newer generation, i.e.
    hosts were added or removed. Raises TuttiError subclasses (PeerLostError
    when a rank is lost meanwhile), NotImplementedError (old libtutti)."""
    updated = ctypes.c_int(0)
    _library.check(_library.function("tutti_elastic_hosts_updated")(ctypes.byref(updated)))
    return bool(updated.value)


def compression_residuals():
    """This rank's error-feedback residuals of top-k/int8 compression as bytes
    (opaque; tutti_get_compression_residuals), to keep with a committed state.
    Raises NotInitializedError, NotImplementedError (old libtutti)."""
    fn = _library.function("tutti_get_compression_residuals")
    size = ctypes.c_size_t(0)
    _library.check(fn(None, 0, ctypes.byref(size)))
    while True:
        buf = ctypes.create_string_buffer(max(size.value, 1))
        rc = fn(buf, len(buf), ctypes.byref(size))
        if rc == 0:
            return buf.raw[:size.value]
        if size.value <= len(buf):  # not a size race: a real error
            _library.check(rc)


def set_compression_residuals(data):
    """Replaces this rank's residuals with bytes from compression_residuals()
    (rank-local: never broadcast). Raises InvalidArgumentError naming what is
    wrong with the bytes (nothing changes then), NotInitializedError."""
    data = bytes(data)
    _library.check(_library.function("tutti_set_compression_residuals")(data, len(data)))


class State:
    """In-memory training state that survives membership changes (Horovod's State).

    bcast_object(obj) -> obj: returns rank 0's obj on every rank (a
    collective); called as bcast_object(obj, root_rank=r) when the sync root
    is another rank. get_rank() -> int: this worker's current rank.
    allgather_object(obj) -> list (optional, a collective): lets sync() take
    the state from the rank with the newest commit (see sync_root()); without
    it the root is rank 0. Subclasses implement save() (snapshot to host
    memory), restore() (back to the last snapshot) and sync() (the root's
    values everywhere), and may override reset() (called after joining a new
    generation, before the callbacks).
    """

    def __init__(self, bcast_object, get_rank, allgather_object=None):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._allgather_object = allgather_object
        self._reset_callbacks = []
        self._commits = 0  # commits this state has seen, job-wide (equal on every rank after sync)

    def sync_root(self):
        """The rank whose state sync() spreads (a collective when allgather_object was given).

        The lowest rank holding the newest commit. Usually rank 0 (the surviving
        member with the lowest rank), but when a peer is lost in the middle of
        a step's allreduce, the ranks that finished the step may have committed
        it while others failed before their commit; taking the newest commit
        means no committed step is lost. A newcomer (no commit yet) is never
        the root while a member that committed is there. Also makes every
        rank's commit count the root's.
        """
        if self._allgather_object is None:
            return 0
        counts = self._allgather_object(self._commits)
        newest = max(counts)
        self._commits = newest
        return counts.index(newest)

    def register_reset_callbacks(self, callbacks):
        """Adds functions (no arguments) called after every reset (worker added
        or removed), in order; e.g. to rescale the learning rate to size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by run_fn once this worker joined a new generation."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (save()), then checks for added or removed hosts
        (check_host_updates()). A collective in an elastic job: call it on
        every rank at the same point. Committing costs a copy of the state;
        steps since the last commit are redone after a peer is lost."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when hosts were added or
        removed (the collective tutti_elastic_hosts_updated); does nothing in a
        job that is not elastic."""
        if enabled() and hosts_updated():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        """Snapshots the state to host memory."""
        raise NotImplementedError()

    def restore(self):
        """Returns the state to the last snapshot, dropping later changes."""
        raise NotImplementedError()

    def sync(self):
        """Makes every rank's state the sync root's (a collective)."""
        raise NotImplementedError()

    def reset(self):
        """Hook run after joining a new generation (before the reset callbacks)."""


class ObjectState(State):
    """State of plain picklable Python values, given as keyword arguments and
    exposed as attributes (``state.epoch``). save() keeps deep copies, so
    mutating an attribute in place (a list) does not change the snapshot;
    restore() sets deep copies of the snapshot; sync() broadcasts the sync
    root's current values (rank 0 unless allgather_object is given, see
    State.sync_root) and saves them on every rank, so every member then holds
    the same snapshot (a newcomer included).
    """

    def __init__(self, bcast_object, get_rank, allgather_object=None, **kwargs):
        self._saved_state = copy.deepcopy(kwargs)
        for attr, value in kwargs.items():
            setattr(self, attr, value)
        super().__init__(bcast_object=bcast_object, get_rank=get_rank,
                         allgather_object=allgather_object)

    def _current(self):
        return {attr: getattr(self, attr) for attr in self._saved_state}

    def save(self):
        self._saved_state = copy.deepcopy(self._current())

    def restore(self):
        for attr, value in copy.deepcopy(self._saved_state).items():
            setattr(self, attr, value)

    def sync(self):
        self._sync_values(self.sync_root())

    def _sync_values(self, root):
        """Sets the attributes to rank `root`'s values and snapshots them."""
        if self._saved_state:
            values = (self._bcast_object(self._current()) if root == 0 else
                      self._bcast_object(self._current(), root_rank=root))
            for attr, value in values.items():
                setattr(self, attr, value)
            ObjectState.save(self)


def run_fn(func, reset):
    """Wraps func(state, *args, **kwargs) into the elastic loop (Horovod's run_fn).

    Loop: state.sync() (skipped when the last HostsUpdatedInterrupt said
    skip_sync), then return func(state, ...). On PeerLostError: re-raise when
    the job is not elastic (nobody forms a next generation), else
    state.restore(). On HostsUpdatedInterrupt: keep the state. Either way
    reset() (leave the generation, join the next) and state.on_reset(), then
    loop. An error of reset() or on_reset() other than these two propagates
    (e.g. ShutdownError when the driver gave up).
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        reset_required = False
        while True:
            try:
                if reset_required:
                    reset()
                    state.on_reset()
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except PeerLostError:
                if not enabled():
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset_required = True

    return wrapper

"""Process sets: collectives over a subset of the job's ranks (Horovod's
horovod.common.process_sets, 0.28.1), framework-independent.

A ProcessSet is a sorted list of global ranks. Once registered (by
init(process_sets=[...]) or add_process_set(), both collective over every
rank of the job), it has a process_set_id (> 0; the global set, every rank,
is 0) and the collectives accept it as process_set=: its members take the
place of every rank (sizes, splits, output order and the set's rank i = its
i-th smallest global rank), except broadcast's root_rank, which stays a
global rank, as in Horovod. docs/process-sets.md has the whole story.

Differences from Horovod: no opt-in is needed for sets added after init()
(HOROVOD_DYNAMIC_PROCESS_SETS, and init(process_sets="dynamic"), are
accepted and change nothing); ids count up and are not reused; an mpi4py
communicator is not accepted (ValueError); process_set_by_id() and
process_sets() are tutti's own.

Errors (ValueError subclasses where Horovod raises ValueError): bad or
duplicate ranks, a set whose ranks are already registered, and an op on a set
this rank is not in or that is not (or no longer) registered raise
InvalidArgumentError, a ValueError; ranks that pass different lists to one
registration raise MismatchError (a HorovodInternalError). Registration
errors are raised on every rank (nothing hangs).

A shutdown (and an elastic job's move to a new generation) unregisters every
set but the global one: the objects are invalidated (process_set_id None)
and must be added again.

Thread-safety: registration and removal are collectives: call them from one
thread, in the same order on every rank. The queries may be called from any
thread.
"""

import ctypes
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from tutti import _library, _placement
from tutti.errors import InvalidArgumentError

_lock = threading.Lock()
# process_set_id -> the ProcessSet object registered with it
_registered: Dict[int, "ProcessSet"] = {}


def _is_iterable(x: Any) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return True


def _info(process_set_id: int) -> Tuple[int, int]:
    """(size, rank in set or -1) from libtutti. Raises InvalidArgumentError for
    an unknown id, NotInitializedError before init()."""
    size, rank = ctypes.c_int(), ctypes.c_int()
    _library.check(_library.function("tutti_process_set_info")(
        int(process_set_id), ctypes.byref(size), ctypes.byref(rank)))
    return size.value, rank.value


def _list_from(fn_name: str, *args: Any) -> List[int]:
    """A list of ints from a libtutti copy-out query (ranks or ids)."""
    fn = _library.function(fn_name)
    count = ctypes.c_int()
    _library.check(fn(*args, None, 0, ctypes.byref(count)))
    buf = (ctypes.c_int * max(count.value, 1))()
    _library.check(fn(*args, buf, count.value, ctypes.byref(count)))
    return list(buf)[:count.value]


def _registered_ranks(process_set_id: int) -> List[int]:
    return _list_from("tutti_process_set_ranks", int(process_set_id))


class ProcessSet:
    """A set of ranks that run collectives together (Horovod's hvd.ProcessSet).

    ranks_or_comm: an iterable of global ranks (ints; kept sorted). Pass the
    object to init(process_sets=[...]) or add_process_set() to register it;
    then process_set_id is its id and the collectives take it as
    process_set=. An mpi4py communicator is not supported (ValueError).
    Duplicate or out-of-range ranks are found at registration (ValueError).
    """

    process_set_id: Optional[int] = None
    # Horovod's class attribute; every instance sets a sorted list in __init__.
    ranks: List[int] = None  # type: ignore[assignment]
    mpi_comm: None = None  # always None in tutti (Horovod's sets from an mpi4py communicator)

    def __init__(self, ranks_or_comm: Iterable[int]) -> None:
        if not _is_iterable(ranks_or_comm):
            raise ValueError(
                "ProcessSet(%r): tutti builds process sets from a list of global ranks only; an "
                "MPI communicator (mpi4py) or other object is not supported" % (ranks_or_comm,))
        ranks = list(ranks_or_comm)
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks "
                             "(ints), got %r" % (ranks,))
        self.ranks = sorted(ranks)

    def _invalidate(self) -> None:
        self.process_set_id = None

    def size(self) -> Optional[int]:
        """Number of ranks in the set; None while it is not registered.
        ValueError when its id is no longer registered."""
        if self.process_set_id is None:
            return None
        return _size_of(self.process_set_id)

    def rank(self) -> Optional[int]:
        """This process's rank within the set (0 for its smallest global
        rank); None while the set is not registered. ValueError when this
        process is not a member ("Process is not part of provided process
        set."), as Horovod. Collectives still take global ranks for
        broadcast's root_rank."""
        if self.process_set_id is None:
            return None
        return _rank_in(self.process_set_id)

    def included(self) -> Optional[bool]:
        """Whether this process is a member (None when ranks is None)."""
        if self.ranks is None:
            return None
        return _placement.rank() in self.ranks

    def __str__(self) -> str:
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)


class _GlobalProcessSet(ProcessSet):
    """Every rank of the job, id 0; ranks follow the running job (empty
    before init(), as Horovod's until init())."""

    def __init__(self) -> None:
        super().__init__([])
        self.process_set_id = 0

    @property  # type: ignore[override]  # derived from the job: read-only
    def ranks(self) -> List[int]:
        return list(range(_placement.size())) if _placement.is_initialized() else []

    @ranks.setter
    def ranks(self, value: object) -> None:
        pass  # derived from the job

    def _invalidate(self) -> None:
        pass  # the global set is never removed

    def __repr__(self) -> str:
        return "global_process_set"


global_process_set = _GlobalProcessSet()


def _checked_info(process_set_id: int) -> Tuple[int, int]:
    try:
        return _info(process_set_id)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(
            "Process set does not exist or has not been registered (id %d): %s"
            % (process_set_id, e), e.code) from None


def _size_of(process_set_id: int) -> int:
    if process_set_id == 0:
        return _placement.size()
    return _checked_info(process_set_id)[0]


def _rank_in(process_set_id: int) -> int:
    if process_set_id == 0:
        return _placement.rank()
    rank = _checked_info(process_set_id)[1]
    if rank < 0:
        raise InvalidArgumentError("Process is not part of provided process set (id %d)"
                                   % process_set_id, 1)
    return rank


def process_set_id(process_set: Optional[object]) -> int:
    """The id to pass to libtutti for process_set= (None: the global set, 0).

    Raises InvalidArgumentError (a ValueError) for an object that is not a
    ProcessSet or a set that is not registered (never added, removed, or
    from before a shutdown or elastic reset): the ops call it before
    enqueueing anything.
    """
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise InvalidArgumentError(
            "process_set must be a tutti ProcessSet (e.g. hvd.global_process_set or one from "
            "hvd.add_process_set()), got %s" % type(process_set).__name__, 1)
    if process_set.process_set_id is None:
        raise InvalidArgumentError(
            "%s is not registered: pass it to init(process_sets=[...]) or add_process_set() "
            "first (a removed set, or one registered before a shutdown or an elastic reset, "
            "must be added again)" % process_set, 1)
    return int(process_set.process_set_id)


def set_size(process_set: Optional[object]) -> int:
    """Size of process_set (None: the global set) as the collectives see it."""
    return _size_of(process_set_id(process_set))


def set_rank(process_set: Optional[object]) -> int:
    """This rank's rank within process_set (None: the global set); ValueError
    when not a member."""
    return _rank_in(process_set_id(process_set))


def set_ranks(process_set: Optional[object]) -> List[int]:
    """The global ranks of process_set (None: the global set), ascending."""
    ps_id = process_set_id(process_set)
    if ps_id == 0:
        return global_process_set.ranks
    return _registered_ranks(ps_id)


def _register(process_set: ProcessSet) -> ProcessSet:
    """Registers process_set's ranks (collective) and records the object."""
    new_id = ctypes.c_int()
    n = len(process_set.ranks)
    arr = (ctypes.c_int * max(n, 1))(*process_set.ranks)
    try:
        _library.check(_library.function("tutti_add_process_set")(arr, n, ctypes.byref(new_id)))
    except InvalidArgumentError as e:
        raise InvalidArgumentError("could not add %s: %s" % (process_set, e), e.code) from None
    process_set.process_set_id = new_id.value
    with _lock:
        _registered[new_id.value] = process_set
    return process_set


def add_process_set(process_set: Union[ProcessSet, Iterable[int]]) -> ProcessSet:
    """Registers a process set after init() and returns it (Horovod's
    hvd.add_process_set). process_set: a ProcessSet or an iterable of global
    ranks (a new ProcessSet is made). Collective over every rank of the job:
    all call it in the same order with the same ranks; blocks until the set
    is registered everywhere. Raises InvalidArgumentError (a ValueError) on
    every rank for duplicate or out-of-range ranks, an empty list, or ranks
    that form a registered set already (the global set included);
    MismatchError when the ranks passed different lists;
    NotInitializedError before init()."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise InvalidArgumentError("%s is registered already" % process_set, 1)
    return _register(process_set)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregisters process_set (collective, like add_process_set) and
    invalidates the object (process_set_id becomes None). Returns True when
    it was removed; False for the global set or a set that is not registered
    (then nothing is exchanged), as Horovod. Its ops still pending fail with
    InvalidArgumentError."""
    ps_id = process_set.process_set_id
    if ps_id is None or ps_id == 0:
        return False
    with _lock:
        known = _registered.pop(ps_id, None)
    process_set._invalidate()
    if known is not None and known is not process_set:
        known._invalidate()
    _library.check(_library.function("tutti_remove_process_set")(int(ps_id)))
    return True


def process_set_by_id(process_set_id: int) -> ProcessSet:
    """The registered ProcessSet with this id (tutti's; an intermediate
    Horovod had it). ValueError for an unknown id."""
    if process_set_id == 0:
        return global_process_set
    with _lock:
        found = _registered.get(process_set_id)
    if found is None:
        raise ValueError("No known process set with id %s" % (process_set_id,))
    return found


def process_sets() -> List[ProcessSet]:
    """Every registered ProcessSet, the global set first, by id."""
    with _lock:
        return [global_process_set] + [_registered[k] for k in sorted(_registered)]


def _static_entries(process_set_list: Union[None, str, Sequence[Any]]) -> List[ProcessSet]:
    """The list of ProcessSets of init(process_sets=...): None and "dynamic"
    (Horovod's opt-in; tutti needs none) give []. ValueError otherwise."""
    if process_set_list is None:
        return []
    if isinstance(process_set_list, str):
        if process_set_list.lower() != "dynamic":
            raise ValueError('init(process_sets=%r): expected a list of ProcessSet objects or '
                             '"dynamic"' % process_set_list)
        return []
    entries = list(process_set_list)
    for i, ps in enumerate(entries):
        if not isinstance(ps, ProcessSet):
            raise ValueError("init(process_sets=...): entry number %d is a %s, not a ProcessSet"
                             % (i, type(ps).__name__))
    return entries


def _init_process_sets(entries: List[ProcessSet], was_initialized: bool) -> None:
    """Registers init(process_sets=...)'s sets, in order (collective). Horovod's
    rules: an entry with the ranks of the global set or of an earlier entry is
    a duplicate: invalidated, and init() raises ValueError naming it after
    registering the others. When init() found tutti initialised already, no
    set is registered: each entry takes the id of the registered set with its
    ranks, if any (ValueError otherwise)."""
    first_error = None
    seen = {tuple(global_process_set.ranks)}
    for i, ps in enumerate(entries):
        key = tuple(ps.ranks)
        if key in seen:
            ps._invalidate()
            first_error = first_error or ValueError(
                "tutti could not be initialized because process_sets entry number %d is a "
                "duplicate: %s" % (i, ps))
            continue
        seen.add(key)
        if was_initialized:
            existing = [s for s in process_sets() if tuple(s.ranks) == key]
            if not existing:
                raise ValueError("init(process_sets=...) while tutti is initialised already: "
                                 "%s is not registered; use add_process_set()" % ps)
            ps.process_set_id = existing[0].process_set_id
            continue
        try:
            _register(ps)
        except InvalidArgumentError as e:  # raised on every rank: go on as they all do
            first_error = first_error or e
    if first_error is not None:
        raise first_error


def _forget_all() -> None:
    """Invalidates every registered set (after a shutdown or an elastic leave:
    the new runtime knows the global set only)."""
    with _lock:
        gone = list(_registered.values())
        _registered.clear()
    for ps in gone:
        ps._invalidate()

"""ProcessGroupTutti: a torch.distributed process group whose collectives are
tutti's (negotiation, fusion, shared memory and TCP rings).

A Python subclass of torch.distributed.ProcessGroup (torch 1.13): torch's
Python functions (dist.all_reduce, ...) call its methods directly, and C++
callers (DistributedDataParallel's reducer: allreduce, allgather, broadcast)
reach them through torch's trampoline class. No compilation against libtorch:
the same code runs on any torch whose ProcessGroup can be subclassed in
Python (1.13 here).

Names. Every op enqueues exactly one tutti op, named
"torch.<group>.<kind>.<dtype>.<elements>#<k>": the op's kind and what every
rank must agree on (dtype, and the element count where ranks must pass equal
sizes), and k counting that signature's ops in this group modulo WINDOW.
torch issues collectives in the same order on every rank, so the names
agree; they do not depend on how ops of *different* signatures interleave
across threads (DDP's autograd thread starts bucket allreduces and its
unused-parameter map while comm-hook callbacks, e.g. PowerSGD's, start theirs
on whichever thread completed a future: an order that differs across ranks).
Names repeat every WINDOW ops of a signature, so DDP's buckets hit tutti's
response cache; before reusing a name, the op waits until its previous use
completed on this rank (which needs nothing from this rank: every rank
issued it earlier). A rank whose op has a different kind or size than the
others' waits like a rank that never called it: tutti's stall inspector
names the op and the ranks after TUTTI_STALL_CHECK_TIME_SECONDS and fails it
after TUTTI_STALL_SHUTDOWN_TIME_SECONDS (default 1800 s, torch's default
timeout). A rank with a different shape of equal size, root or reduce op
gets tutti's mismatch error naming both.

Each op's result is a torch.futures.Future completed on a completion thread
(_completion.py: libtutti signals completions through a pipe); an
op's error (a tutti.TuttiError such as PeerLostError or MismatchError) is
the future's error, raised by wait() as a RuntimeError carrying tutti's
class and message. torch's Python functions get a FutureWork around it
(wait() raises); C++ callers get torch's own Work from
_create_work_from_future (DDP's reducer reads the future). The future's
value is the list of output tensors (for all_reduce and broadcast:
[tensor], as gloo's).

Tensors: one tensor per call (no multi-device lists), CPU (CUDA when tutti
was built with CUDA), dtypes uint8, int8, int16, int32, int64, float16,
bfloat16, float32, float64, bool. Unsupported: send, recv, recv_anysource,
monitored_barrier, allgather_coalesced (RuntimeError naming the op).

Thread-safety: ops may be called from any thread; the names follow the order
in which calls reach the group, so calls that race on different threads of
one rank must not be collectives whose order matters (torch's own rule).
"""

import os
import sys
import threading

import torch
import torch.distributed as dist

from tutti.torch import ops
from tutti.torch.distributed import _collectives as col
from tutti.torch.distributed._completion import complete_later

WINDOW = 4  # distinct names per signature (ops of one signature in flight at once)


_C10D_PY = os.path.join("torch", "distributed", "distributed_c10d.py")


def _called_from_python_api():
    """True when torch's Python functions (dist.all_reduce, ...) called the op,
    False when C++ did (DDP's reducer, through torch's trampoline)."""
    frame = sys._getframe(2)  # _called_from_python_api <- _run <- the op <- caller
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.endswith(_C10D_PY)


class FutureWork(dist.Work):
    """The Work returned to torch's Python functions: wait() raises the op's
    error (torch's future-wrapping Work returns False instead, which
    dist.all_reduce(t) without async_op would ignore). C++ callers get
    torch's own future-wrapping Work: a Python Work handed to C++ can be
    freed while C++ still holds it."""

    def __init__(self, future):
        super().__init__()
        self._future = future

    def wait(self, timeout=None):
        self._future.wait()  # raises the op's error
        return True

    def get_future(self):
        return self._future

    def is_completed(self):
        return self._future.done()

    def is_success(self):
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001 (failed: that is the answer)
            return False
        return True

    def result(self):
        return self._future.wait()

    def synchronize(self):
        self._future.wait()


def _sig(kind, *tensors, count=True):
    """An op's signature: kind, dtype, and (count) the element count."""
    dtype = str(tensors[0].dtype).replace("torch.", "") if tensors else "none"
    if not count:
        return "%s.%s" % (kind, dtype)
    return "%s.%s.%d" % (kind, dtype, sum(t.numel() for t in tensors))


def _one(tensors, op):
    if len(tensors) != 1:
        raise RuntimeError("tutti backend: %s takes one tensor per call (got a list of %d; "
                           "multi-device lists are not supported)" % (op, len(tensors)))
    return tensors[0]


def _root(opts, op):
    if getattr(opts, "rootTensor", 0) != 0:
        raise RuntimeError("tutti backend: %s with rootTensor=%d; only 0 (one tensor per call)"
                           % (op, opts.rootTensor))
    return opts.rootRank


class ProcessGroupTutti(dist.ProcessGroup):
    """The process group torch creates for backend "tutti" (see the module
    docstring). rank/size: this process's rank in the group and its size.
    process_set: the tutti process set of the group's ranks (None: every
    rank). group_id: a name the same on every rank of the group. error: when
    not None, the group cannot run collectives (e.g. a subgroup tutti cannot
    map) and every op raises it."""

    def __init__(self, rank, size, process_set, group_id, error=None):
        super().__init__(rank, size)
        self._process_set = process_set
        self._group_id = group_id or "world"
        self._error = error
        self._lock = threading.Lock()
        self._counts = {}  # signature -> ops started
        self._in_flight = {}  # name -> threading.Event set once that op completed here

    def getBackendName(self):  # noqa: N802 (torch's name)
        return "tutti"

    def __repr__(self):
        return "ProcessGroupTutti(rank=%d, size=%d, group=%r)" % (self.rank(), self.size(),
                                                                  self._group_id)

    # -- plumbing ---------------------------------------------------------------

    def _name(self, signature):
        """(name, event of the previous op of that name or None, own event)."""
        with self._lock:
            k = self._counts.get(signature, 0)
            self._counts[signature] = k + 1
            name = "torch.%s.%s#%d" % (self._group_id, signature, k % WINDOW)
            done = threading.Event()
            previous = self._in_flight.get(name)
            self._in_flight[name] = done
        return name, previous, done

    def _done(self, name, done):
        done.set()
        with self._lock:
            if self._in_flight.get(name) is done:
                del self._in_flight[name]

    def _run(self, signature, tensors, start, finish):
        """Enqueues one tutti op, start(name, process_set) -> handle, and returns
        a Work whose future gets finish(result of synchronize(handle))."""
        if self._error is not None:
            raise RuntimeError(self._error)
        name, previous, done = self._name(signature)
        if previous is not None:
            previous.wait()
        try:
            handle = start(name, self._process_set)
        except BaseException:
            self._done(name, done)
            raise

        def wait():
            try:
                return ops.synchronize(handle)
            finally:
                self._done(name, done)

        devices = sorted({str(t.device) for t in tensors if t.device.type == "cuda"})
        future = complete_later(ops.c_handles_of(handle), wait, finish, devices or None)
        if _called_from_python_api():
            return FutureWork(future)
        return torch._C._distributed_c10d._create_work_from_future(future)

    # -- collectives --------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "all_reduce")
        op = col.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "all_reduce")
        start, finish = col.allreduce(t, op)
        return self._run(_sig("allreduce", t), [t], start, lambda r: [finish(r)])

    def allreduce_coalesced(self, tensors, opts=None):
        op = col.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                           "all_reduce_coalesced")
        start, finish = col.allreduce_coalesced(list(tensors), op)
        return self._run(_sig("allreduce_coalesced", *tensors), tensors, start, finish)

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        root = _root(opts, "broadcast") if opts is not None else 0
        if self._process_set is not None:  # torch gives the group rank, tutti a global one
            root = self._process_set.ranks[root]

        def start(name, ps):
            return ops.broadcast_async_(t, root, name=name, process_set=ps)

        return self._run(_sig("broadcast", t), [t], start, lambda r: [t])

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        op = col.reduce_op(opts.reduceOp, "reduce")
        start, finish = col.reduce(t, op, _root(opts, "reduce") == self.rank())
        return self._run(_sig("reduce", t), [t], start, lambda r: [finish(r)])

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "all_gather")
        outs = _one(output_tensors, "all_gather")
        col.check_count(outs, self.size(), "all_gather", "output tensors")
        start, finish = col.gather_into(t, outs, "all_gather")
        return self._run(_sig("allgather", t), [t], start, lambda r: [finish(r)])

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 (torch's name)
        col.check_numel(output, input.numel() * self.size(), "_all_gather_base output")
        start, finish = col.gather_into(input, [output], "_all_gather_base")
        return self._run(_sig("allgather", input), [input], start, lambda r: [finish(r)])

    def gather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "gather")
        root = opts.rootRank
        outs = None
        if self.rank() == root:
            outs = _one(output_tensors, "gather")
            col.check_count(outs, self.size(), "gather", "gather_list entries")
        start, finish = col.gather(t, outs, root, self.size())
        return self._run(_sig("gather", t), [t], start,
                         lambda r: [finish(r)] if outs is not None else [])

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "scatter")
        root = opts.rootRank
        chunks = None
        if self.rank() == root:
            chunks = _one(input_tensors, "scatter")
            col.check_count(chunks, self.size(), "scatter", "scatter_list entries")
        start, finish = col.scatter(out, chunks, root, self.size())
        return self._run(_sig("scatter", out), [out], start, lambda r: [finish(r)])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter")
        inputs = _one(input_tensors, "reduce_scatter")
        col.check_count(inputs, self.size(), "reduce_scatter", "input tensors")
        op = col.reduce_op(opts.reduceOp, "reduce_scatter")
        start, finish = col.reduce_scatter(out, inputs, op, self.rank(), self.size())
        return self._run(_sig("reduce_scatter", out), [out], start, lambda r: [finish(r)])

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002
        col.check_numel(input, output.numel() * self.size(), "_reduce_scatter_base input")
        op = col.reduce_op(opts.reduceOp, "_reduce_scatter_base")
        rows = input.reshape(self.size(), output.numel())
        start, finish = col.reduce_scatter(output, rows, op, self.rank(), self.size())
        return self._run(_sig("reduce_scatter", output), [output], start,
                         lambda r: [finish(r)])

    def alltoall_base(self, output, input, output_split_sizes,  # noqa: A002
                      input_split_sizes, opts=None):
        start, finish = col.alltoall_single(output, input, list(output_split_sizes),
                                            list(input_split_sizes), self.size())
        return self._run(_sig("alltoall", input, count=False), [input], start,
                         lambda r: [finish(r)])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        col.check_count(output_tensors, self.size(), "all_to_all", "output tensors")
        col.check_count(input_tensors, self.size(), "all_to_all", "input tensors")
        start, finish = col.alltoall(list(output_tensors), list(input_tensors))
        return self._run(_sig("alltoall", input_tensors[0], count=False), input_tensors, start,
                         finish)

    def barrier(self, opts=None):
        return self._run("barrier", [], col.barrier_start, lambda r: [])

    # -- what tutti does not do -----------------------------------------------------

    def _unsupported(self, op, why="tutti has collectives only, no point-to-point messages"):
        raise RuntimeError("tutti backend does not support %s: %s; use a gloo group for it "
                           "(dist.new_group(backend='gloo'))" % (op, why))

    def send(self, tensors, dst, tag=0):
        self._unsupported("send")

    def recv(self, tensors, src, tag=0):
        self._unsupported("recv")

    def recv_anysource(self, tensors, tag=0):
        self._unsupported("recv_anysource")

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self._unsupported("monitored_barrier", "it is gloo's debugging barrier; use barrier()")

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        self._unsupported("all_gather_coalesced", "not implemented; call all_gather per tensor")

"""The collectives of backend "tutti", shared by torch 1.x's ProcessGroupTutti
(process_group.py) and torch 2.x's BackendTutti (backend.py).

GroupOps is a mixin: the class that uses it is also a torch class (a
ProcessGroup on 1.x, a c10d Backend on 2.x) and provides
_work(completion, opts=None, source=None), which turns the op (an
OpCompletion, or a PendingRecv) into the Work returned to torch (_work.py;
source: a recv's sender, a group rank or a callable giving it).

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
(_completion.py: libtutti signals completions through a pipe); an op's error
(a tutti.TuttiError such as PeerLostError or MismatchError) is the future's
error, raised by the Work's wait() as a RuntimeError carrying tutti's class
and message. The future's value is the list of output tensors (for
all_reduce and broadcast: [tensor], as gloo's).

Tensors: one tensor per call (no multi-device lists), CPU (CUDA when tutti
was built with CUDA). Reductions take uint8, uint16, uint32, uint64, int8,
int16, int32, int64, float16, bfloat16, float32, float64, bool; the
data-movement collectives (all_gather, broadcast, all_to_all, gather, scatter,
send/recv) also take
float8 tensors (moved as their bytes). Other dtypes raise RuntimeError
naming the dtype.

Thread-safety: ops may be called from any thread; the names follow the order
in which calls reach the group, so calls that race on different threads of
one rank must not be collectives whose order matters (torch's own rule).
"""

import os
import sys
import threading

import torch
import torch.distributed as dist

from tutti import _library
from tutti.torch import _core, ops
from tutti.torch.distributed import _collectives as col
from tutti.torch.distributed import _p2p
from tutti.torch.distributed._anysource import AnySource
from tutti.torch.distributed._completion import OpCompletion, in_future_callback
from tutti.torch.distributed._monitored_barrier import MonitoredBarrier

WINDOW = 4  # distinct names per signature (ops of one signature in flight at once)

_C10D_PY = os.path.join("torch", "distributed", "distributed_c10d.py")
_OWN_FILES = {__file__, os.path.join(os.path.dirname(__file__), "process_group.py"),
              os.path.join(os.path.dirname(__file__), "_p2p.py")}


def called_from_python_api():
    """True when torch's Python functions (dist.all_reduce, ...) called the op
    directly (torch 1.x), False when C++ did (DDP's reducer, through torch's
    trampoline): the first frame outside this package's group code."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in _OWN_FILES:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.endswith(_C10D_PY)


def _sig(kind, *tensors, count=True):
    """An op's signature: kind, dtype, and (count) the element count."""
    dtype = str(tensors[0].dtype).replace("torch.", "") if tensors else "none"
    if not count:
        return "%s.%s" % (kind, dtype)
    return "%s.%s.%d" % (kind, dtype, sum(t.numel() for t in tensors))


def _root(opts, op):
    if getattr(opts, "rootTensor", 0) != 0:
        raise RuntimeError("tutti backend: %s with rootTensor=%d; only 0 (one tensor per call)"
                           % (op, opts.rootTensor))
    return opts.rootRank


def _reduce_op(opts, what):
    return col.reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, what)


class GroupOps:
    """torch.distributed's collectives as tutti ops (see the module docstring).

    _setup(process_set, group_id, error, store), called by the concrete class's
    __init__ after torch's (which takes rank and size): process_set is the tutti
    set of the group's ranks (None: every rank); group_id a name the same on
    every rank of the group; error, when not None, is raised by every op (a
    subgroup tutti cannot map); store the group's torch store
    (monitored_barrier). The concrete class provides _work(completion)."""

    def _setup(self, process_set, group_id, error=None, store=None):
        self._monitor = MonitoredBarrier(store, self.rank(), self.size())
        self._any_source = AnySource(store, self.rank(), self.size())
        self._process_set = process_set
        self._group_id = group_id or "world"
        self._error = error
        self._lock = threading.Lock()
        self._counts = {}  # signature -> ops started
        self._in_flight = {}  # name -> threading.Event set once that op completed here
        # Whether CPU ops take tutti's ordered lane (tcp and nccl have one; a
        # job-wide compression keeps allreduces negotiated): their names are
        # then not matched, so the per-signature counters are skipped.
        backend = _library.function("tutti_backend")()
        compression = os.environ.get("TUTTI_COMPRESSION", "none").strip().lower()
        self._lane = backend in (b"tcp", b"nccl") and compression in ("", "none")
        self._by_name = False  # negotiate_by_name()

    def negotiate_by_name(self):
        """From now on this group's ops are negotiated by name, not ordered
        (a Python DDP comm hook was registered on it:
        _backend.hook_ddp_comm_hooks). Every rank switches at the same point
        of the group's ops."""
        self._by_name = True

    def getBackendName(self):  # noqa: N802 (torch's name)
        return "tutti"

    def __repr__(self):
        return "%s(rank=%d, size=%d, group=%r)" % (type(self).__name__, self.rank(), self.size(),
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

    def _global_rank(self, group_rank):
        """torch passes group ranks; tutti's roots and peers are global ranks."""
        if self._process_set is None:
            return group_rank
        return self._process_set.ranks[group_rank]

    def _run(self, signature, tensors, start, finish, opts=None):
        """Enqueues one tutti op, start(name, process_set) -> handle, and returns
        the Work of a future that gets finish(result of synchronize(handle)):
        self._work(completion, opts) (_completion.OpCompletion), opts being torch's
        options of the call."""
        if self._error is not None:
            raise RuntimeError(self._error)
        # torch's contract, the same order on every rank, holds for ops its
        # callers issue; not for those that future callbacks (comm hooks)
        # issue, whichever thread runs them: those are negotiated by name.
        ordered = not self._by_name and not in_future_callback()
        if ordered and self._lane and all(t.device.type == "cpu" for t in tensors):
            name, previous, done = signature, None, None  # the ordered lane numbers them
        else:
            name, previous, done = self._name(signature)
        if previous is not None:
            previous.wait()
        try:
            if ordered:
                with _core.ordered_lane():
                    handle = start(name, self._process_set)
            else:
                handle = start(name, self._process_set)
        except BaseException:
            if done is not None:
                self._done(name, done)
            raise

        def wait():
            try:
                return ops.synchronize(handle)
            finally:
                if done is not None:
                    self._done(name, done)

        devices = sorted({str(t.device) for t in tensors if t.device.type == "cuda"})
        completion = OpCompletion(ops.c_handles_of(handle), wait, finish, devices or None)
        return self._work(completion, opts)

    # -- reductions ---------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = col.one_tensor(tensors, "all_reduce")
        if t.is_sparse:
            return self.allreduce_sparse(tensors, opts)
        start, finish = col.allreduce(t, _reduce_op(opts, "all_reduce"))
        return self._run(_sig("allreduce", t), [t], start, lambda r: [finish(r)], opts)

    def allreduce_sparse(self, tensors, opts=None):
        t = col.one_tensor(tensors, "all_reduce")
        start, finish = col.allreduce_sparse(t, _reduce_op(opts, "all_reduce"))
        return self._run(_sig("allreduce_sparse", t, count=False), [t], start,
                         lambda r: [finish(r)], opts)

    def allreduce_coalesced(self, tensors, opts=None):
        red = _reduce_op(opts, "all_reduce_coalesced")
        start, finish = col.allreduce_coalesced(list(tensors), red)
        return self._run(_sig("allreduce_coalesced", *tensors), tensors, start, finish, opts)

    def reduce(self, tensors, opts=None):
        t = col.one_tensor(tensors, "reduce")
        red = _reduce_op(opts, "reduce")
        start, finish = col.reduce(t, red, _root(opts, "reduce") == self.rank())
        return self._run(_sig("reduce", t), [t], start, lambda r: [finish(r)], opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = col.one_tensor(output_tensors, "reduce_scatter")
        inputs = col.one_tensor(input_tensors, "reduce_scatter")
        col.check_count(inputs, self.size(), "reduce_scatter", "input tensors")
        red = _reduce_op(opts, "reduce_scatter")
        start, finish = col.reduce_scatter(out, inputs, red, self.rank(), self.size())
        return self._run(_sig("reduce_scatter", out), [out], start, lambda r: [finish(r)], opts)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 (torch's name)
        col.check_numel(input, output.numel() * self.size(), "reduce_scatter_tensor input")
        red = _reduce_op(opts, "reduce_scatter_tensor")
        rows = input.reshape(self.size(), output.numel())
        start, finish = col.reduce_scatter(output, rows, red, self.rank(), self.size())
        return self._run(_sig("reduce_scatter", output), [output], start,
                         lambda r: [finish(r)], opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        red = _reduce_op(opts, "reduce_scatter_tensor_coalesced")
        start, finish = col.reduce_scatter_coalesced(list(outputs), list(inputs), red,
                                                     self.rank(), self.size())
        return self._run(_sig("reduce_scatter_coalesced", *outputs), list(outputs), start,
                         finish, opts)

    # -- data movement --------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        t = col.one_tensor(tensors, "broadcast")
        root = self._global_rank(_root(opts, "broadcast") if opts is not None else 0)
        start = col.broadcast(t, root)
        return self._run(_sig("broadcast", t), [t], start, lambda r: [t], opts)

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = col.one_tensor(input_tensors, "all_gather")
        outs = col.one_tensor(output_tensors, "all_gather")
        col.check_count(outs, self.size(), "all_gather", "output tensors")
        start, finish = col.gather_into(t, outs, "all_gather")
        return self._run(_sig("allgather", t), [t], start, lambda r: [finish(r)], opts)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 (torch's name)
        col.check_numel(output, input.numel() * self.size(), "all_gather_into_tensor output")
        start, finish = col.gather_into(input, [output], "all_gather_into_tensor")
        return self._run(_sig("allgather", input), [input], start, lambda r: [finish(r)], opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        start, finish = col.allgather_coalesced(list(outputs), list(inputs), self.size())
        return self._run(_sig("allgather_coalesced", *inputs), list(inputs), start, finish, opts)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """torch's layout (gloo's): output_lists[r][k] gets rank r's input_list[k]."""
        col.check_count(output_lists, self.size(), "all_gather_coalesced", "output lists")
        for r, outs in enumerate(output_lists):
            if len(outs) != len(input_list):
                raise RuntimeError("tutti backend: all_gather_coalesced output list %d holds %d "
                                   "tensors; expected one per input (%d)"
                                   % (r, len(outs), len(input_list)))
            for k, (out, inp) in enumerate(zip(outs, input_list)):
                col.check_numel(out, inp.numel(), "all_gather_coalesced output [%d][%d]" % (r, k))
        flat_outs = [torch.empty([self.size() * t.numel()], dtype=t.dtype, device=t.device)
                     for t in input_list]
        start, finish = col.allgather_coalesced(flat_outs, list(input_list), self.size())

        def split(result):
            for k, flat in enumerate(finish(result)):
                for outs, part in zip(output_lists, flat.chunk(self.size())):
                    outs[k].copy_(part.view(outs[k].shape))
            return [t for outs in output_lists for t in outs]

        return self._run(_sig("allgather_coalesced", *input_list), list(input_list), start, split,
                         opts)

    def gather(self, output_tensors, input_tensors, opts=None):
        t = col.one_tensor(input_tensors, "gather")
        root = opts.rootRank
        outs = None
        if self.rank() == root:
            outs = col.one_tensor(output_tensors, "gather")
            col.check_count(outs, self.size(), "gather", "gather_list entries")
        start, finish = col.gather(t, outs, root, self.size())
        return self._run(_sig("gather", t), [t], start,
                         lambda r: [finish(r)] if outs is not None else [], opts)

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = col.one_tensor(output_tensors, "scatter")
        root = opts.rootRank
        chunks = None
        if self.rank() == root:
            chunks = col.one_tensor(input_tensors, "scatter")
            col.check_count(chunks, self.size(), "scatter", "scatter_list entries")
        start, finish = col.scatter(out, chunks, root, self.size())
        return self._run(_sig("scatter", out), [out], start, lambda r: [finish(r)], opts)

    def alltoall_base(self, output, input, output_split_sizes,  # noqa: A002
                      input_split_sizes, opts=None):
        start, finish = col.alltoall_single(output, input, list(output_split_sizes),
                                            list(input_split_sizes), self.size())
        return self._run(_sig("alltoall", input, count=False), [input], start,
                         lambda r: [finish(r)], opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        col.check_count(output_tensors, self.size(), "all_to_all", "output tensors")
        col.check_count(input_tensors, self.size(), "all_to_all", "input tensors")
        start, finish = col.alltoall(list(output_tensors), list(input_tensors))
        return self._run(_sig("alltoall", input_tensors[0], count=False), input_tensors, start,
                         finish, opts)

    def barrier(self, opts=None):
        return self._run("barrier", [], col.barrier_start, lambda r: [], opts)

    # -- gloo's debugging barrier and point-to-point ----------------------------------

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self._monitor.run(timeout, wait_all_ranks)

    def send(self, tensors, dst, tag=0):
        return self._work(_p2p.send(self, tensors, dst, tag))

    def recv(self, tensors, src, tag=0):
        return self._work(_p2p.recv(self, tensors, src, tag), source=src)

    def recv_anysource(self, tensors, tag=0):
        pending = _p2p.recv_anysource(self, tensors, tag)
        return self._work(pending, source=pending.source)

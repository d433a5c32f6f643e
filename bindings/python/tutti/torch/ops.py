"""Collectives on PyTorch tensors, over libtutti's C API (Horovod's torch API).

Every op has an asynchronous form returning a handle (an int) and a blocking
form (= async + synchronize). Tensors: CPU, or CUDA when tutti was built with CUDA (built_with("cuda")); an
op on a CUDA tensor is ordered after the work queued on the tensor device's
current stream (torch.cuda.current_stream()) and synchronize() returns once
tutti's device work finished; allgather, alltoall and reducescatter results
come back on the input's device. Any shape, any dtype of
uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool.
Non-contiguous inputs are copied to contiguous buffers; in-place ops (the
ones ending in "_") copy the result back into the caller's tensor.
alltoall and reducescatter are defined in tutti.torch.exchange and
re-exported here.

Names: ops are matched across ranks by name; name=None lets the runtime
generate one from a counter, so unnamed ops must be issued in the same order on
every rank. A name may be reused once its previous op completed.

Process sets: every op but join() takes process_set= (None or
global_process_set: every rank; or a registered tutti.ProcessSet, see
tutti.process_sets). Only its members call the op; within it, sizes, splits,
the rank order of outputs and an Average's divisor are the set's; broadcast's
root_rank stays a global rank (a member). An op on a set this rank is not in,
or on an unregistered set, raises InvalidArgumentError (a ValueError) at
once. CUDA tensors over sets are accepted (not yet run on a GPU:
docs/process-sets.md).

Errors: enqueue errors raise at once (InvalidArgumentError, DuplicateNameError,
NotInitializedError, PeerLostError, ...); errors of the op itself
(MismatchError, PeerLostError, StalledError, ShutdownError) are raised by
synchronize(). All are tutti.TuttiError subclasses carrying the core's message.

Thread-safety: every function may be called from any thread. The tensors of an
op are kept referenced until synchronize() returns; the caller must not change
an input (or read an in-place tensor) before then.
"""

import ctypes
import threading
import warnings

import torch

from tutti import _library
from tutti.basics import built_with, size
from tutti.compression import Compression, native_spec
from tutti.errors import InvalidArgumentError, error_for
from tutti import process_sets as _process_sets
from tutti.process_sets import global_process_set  # noqa: F401 (re-exported)
from tutti.torch import _handles

# Reduce ops (values are tutti_reduce_op). Horovod's names.
Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4
Adasum = 5  # adaptive summation: allreduce only, float16/32/64, 2^k ranks (docs/adasum.md)

_DTYPE_CODES = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.float16: 5,
    torch.bfloat16: 6,
    torch.float32: 7,
    torch.float64: 8,
    torch.bool: 9,
}
_TORCH_DTYPES = {code: dtype for dtype, code in _DTYPE_CODES.items()}


class _Pending:
    """What an in-flight op needs: its C handles, the tensors it borrows, and
    finish(c_handles) that builds the result once every C handle succeeded."""

    __slots__ = ("c_handles", "tensors", "finish")

    def __init__(self, c_handles, tensors, finish):
        self.c_handles = c_handles
        self.tensors = tensors
        self.finish = finish


_lock = threading.Lock()
_pending = {}  # handle (the first C handle) -> _Pending


def _lib():
    return _library.load()


def _encode(name):
    if name is None:
        return None
    name = str(name)
    if "\0" in name:
        raise InvalidArgumentError(
            "tensor name %r contains a NUL character; names are C strings" % name, 1)
    return name.encode("utf-8")


def _check_tensor(tensor, what="tensor"):
    if not torch.is_tensor(tensor):
        raise InvalidArgumentError("%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__), 1)
    if tensor.dtype not in _DTYPE_CODES:
        raise InvalidArgumentError(
            "Tensor type %s is not supported. (%s has dtype %s; tutti supports %s)"
            % (tensor.type(), what, tensor.dtype, ", ".join(str(d) for d in _DTYPE_CODES)), 1)
    if tensor.is_sparse:
        raise InvalidArgumentError("%s is sparse; convert it with .to_dense()" % what, 1)
    if tensor.device.type != "cpu" and not (tensor.device.type == "cuda" and built_with("cuda")):
        raise InvalidArgumentError(
            "%s is on %s; this build of tutti supports CPU%s tensors"
            % (what, tensor.device, " and CUDA" if built_with("cuda") else " (not CUDA)"), 1)


def _contiguous(tensor):
    """A contiguous tensor with tensor's values (tensor itself when it already is)."""
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _desc(tensor):
    """A TensorDesc for a contiguous tensor; the descriptor keeps its shape array alive."""
    shape = (ctypes.c_int64 * tensor.dim())(*tensor.shape)
    device = 1 if tensor.device.type == "cuda" else 0
    device_id = tensor.device.index if device == 1 else -1
    if device == 1:
        # The enqueue that follows on this thread orders after this stream.
        _lib().tutti_set_cuda_stream(torch.cuda.current_stream(tensor.device).cuda_stream)
    ptr = tensor.data_ptr() if tensor.numel() > 0 else None
    return _library.TensorDesc(ptr, _DTYPE_CODES[tensor.dtype], tensor.dim(), shape, device,
                               device_id)


def _register(c_handles, tensors, finish):
    with _lock:
        _pending[c_handles[0]] = _Pending(c_handles, tensors, finish)
    return c_handles[0]


def _op_code(op, average=None):
    # As Horovod's handle_average_backwards_compatibility: op wins, both is a
    # ValueError, average alone is deprecated.
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in "
                      "v1.0 (use op=Average or op=Sum)", DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    if op is None:
        return Average
    if op not in (Sum, Average, Min, Max, Product, Adasum):
        raise InvalidArgumentError(
            "op=%r: expected Sum, Average, Min, Max, Product or Adasum" % (op,), 1)
    return op


def _check_adasum(op, process_set):
    """As Horovod's _allreduce_async: Adasum on a number of ranks that is not
    a power of two raises NotImplementedError before anything is enqueued
    (every rank of the set does the same). Other limits (dtype, CUDA
    tensors, reducescatter) are the core's InvalidArgumentError."""
    if op != Adasum:
        return
    n = process_set.size() if hasattr(process_set, "size") else size()
    if n & (n - 1):
        raise NotImplementedError(
            "Running Adasum with non-power of 2 ranks is not supported yet. (%d ranks; Adasum "
            "runs on 1, 2, 4, 8, ... ranks)" % n)


def _output_tensor(c_handle, device=None):
    """Copies the runtime-sized output of a completed C handle into a new tensor
    (on `device` when given: CUDA ops' outputs come back in host memory)."""
    lib = _lib()
    desc = _library.TensorDesc()
    _library.check(lib.tutti_handle_output(c_handle, ctypes.byref(desc)))
    shape = [desc.shape[i] for i in range(desc.ndim)]
    out = torch.empty(shape, dtype=_TORCH_DTYPES[desc.dtype])
    nbytes = out.numel() * out.element_size()
    _library.check(lib.tutti_handle_output_copy(c_handle, out.data_ptr() if nbytes else None, nbytes))
    if device is not None and device.type != "cpu":
        out = out.to(device)
    return out


def bytes_sent():
    """Bytes this rank was asked to send by tutti's collectives since init()
    (compressed sizes for compressed allreduces; ring-aware). 0 when not
    initialised. For benchmarks: the difference across a training step."""
    return int(_lib().tutti_bytes_sent())


# ---- allreduce ------------------------------------------------------------------


def _native_spec(compression):
    """The C++ spec for compression= (None: the job default); a Python-side
    (Horovod-style) compressor is not accepted by the async ops."""
    spec, python_side = native_spec(compression)
    if python_side is not None:
        raise InvalidArgumentError(
            "compression=%r runs in Python: use allreduce()/grouped_allreduce(), or a "
            "tutti.Compression member here" % (compression,), 1)
    return spec


def _options(ps_id, compression=None):
    """A tutti_op_options for process set ps_id (and compression= of an allreduce)."""
    spec = None if compression is None else _encode(_native_spec(compression))
    return ctypes.byref(_library.op_options(ps_id, spec))


def _allreduce_enqueue(inp, out, name, op, prescale_factor, postscale_factor, compression=None,
                       ps_id=0):
    handle = _library.c_handle()
    d_in = _desc(inp)
    d_out = d_in if out is inp else _desc(out)
    _library.check(_library.function("tutti_allreduce_async_opts")(
        ctypes.byref(d_in), ctypes.byref(d_out), _encode(name), op, float(prescale_factor),
        float(postscale_factor), _options(ps_id, compression), ctypes.byref(handle)))
    return handle.value


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None, compression=Compression.none):
    """Starts an allreduce of `tensor` into a new tensor (same shape and dtype).

    Result: postscale_factor * op(prescale_factor * tensor over ranks). op:
    Average (default), Sum, Min, Max, Product; bool tensors allow Sum/Min/Max/
    Product as logical ops; integer tensors are scaled in float64 and truncated
    toward zero, per rank for prescale_factor, and an integer Average is the
    sum divided by size() truncated (75 over 2 ranks -> 37, -75 -> -37), as
    Horovod's.
    compression: a tutti.Compression member (none, fp16, bf16, topk(r),
    int8(b)) or a spec string, run on tutti's background thread for Sum/Average
    of float tensors. Default Compression.none, as Horovod's; None = the job's
    default (TUTTI_COMPRESSION), which DistributedOptimizer uses for gradients.
    Returns a handle for poll()/synchronize(). Raises TuttiError subclasses.
    """
    ps_id = _process_set_id(process_set)
    _check_tensor(tensor)
    op = _op_code(op, average)
    _check_adasum(op, process_set)
    inp = _contiguous(tensor)
    out = torch.empty_like(inp, memory_format=torch.contiguous_format)
    h = _allreduce_enqueue(inp, out, name, op, prescale_factor, postscale_factor, compression,
                           ps_id)
    return _register([h], (inp, out), lambda hs: out)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None, compression=Compression.none):
    """In-place allreduce_async: the result is written into `tensor` by synchronize()."""
    ps_id = _process_set_id(process_set)
    _check_tensor(tensor)
    op = _op_code(op, average)
    _check_adasum(op, process_set)
    buf = _contiguous(tensor)
    h = _allreduce_enqueue(buf, buf, name, op, prescale_factor, postscale_factor, compression,
                           ps_id)
    if buf is tensor:
        return _register([h], (tensor,), lambda hs: tensor)
    return _register([h], (tensor, buf), lambda hs: tensor.copy_(buf))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Blocking allreduce into a new tensor (see allreduce_async). compression:
    a tutti.Compression member or spec string (run in C++; default none), None
    (the job default), or a Horovod-style object with compress/decompress (run
    in Python). Differentiable (tutti.torch.autograd: Horovod's gradients)."""
    from tutti.torch import autograd

    return autograd.allreduce([tensor], False, name, compression, op=_op_code(op, average),
                              prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                              process_set=process_set)[0]


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    """Blocking in-place allreduce; returns `tensor`."""
    # average= is resolved here so that its DeprecationWarning names the caller.
    return synchronize(allreduce_async_(tensor, None, name, _op_code(op, average),
                                        prescale_factor, postscale_factor, process_set))


def _grouped_enqueue(inputs, outputs, name, op, prescale_factor, postscale_factor,
                     compression=None, ps_id=0):
    n = len(inputs)
    d_in = (_library.TensorDesc * n)(*[_desc(t) for t in inputs])
    d_out = (_library.TensorDesc * n)(*[_desc(t) for t in outputs])
    handles = (_library.c_handle * n)()
    _library.check(_library.function("tutti_grouped_allreduce_async_opts")(
        n, d_in, d_out, _encode(name), op, float(prescale_factor), float(postscale_factor),
        _options(ps_id, compression), handles))
    return list(handles)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None, compression=Compression.none):
    """Starts allreduces of a list of tensors negotiated and fused as one group
    (none starts before all are ready on every rank). One handle for the group;
    synchronize() returns the list of new tensors. compression: as allreduce_async."""
    ps_id = _process_set_id(process_set)
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgumentError("grouped_allreduce needs at least one tensor", 1)
    for i, t in enumerate(tensors):
        _check_tensor(t, "tensors[%d]" % i)
    op = _op_code(op, average)
    _check_adasum(op, process_set)
    inputs = [_contiguous(t) for t in tensors]
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in inputs]
    hs = _grouped_enqueue(inputs, outputs, name, op, prescale_factor, postscale_factor,
                          compression, ps_id)
    return _register(hs, (inputs, outputs), lambda _: outputs)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None, compression=Compression.none):
    """In-place grouped_allreduce_async; synchronize() returns the list `tensors`."""
    ps_id = _process_set_id(process_set)
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgumentError("grouped_allreduce needs at least one tensor", 1)
    for i, t in enumerate(tensors):
        _check_tensor(t, "tensors[%d]" % i)
    op = _op_code(op, average)
    _check_adasum(op, process_set)
    bufs = [_contiguous(t) for t in tensors]
    hs = _grouped_enqueue(bufs, bufs, name, op, prescale_factor, postscale_factor, compression,
                          ps_id)

    def finish(_):
        for t, b in zip(tensors, bufs):
            if b is not t:
                t.copy_(b)
        return tensors

    return _register(hs, (tensors, bufs), finish)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Blocking grouped allreduce; returns a list of new tensors. compression:
    as allreduce(). Differentiable (tutti.torch.autograd)."""
    from tutti.torch import autograd

    return autograd.allreduce(tensors, True, name, compression, op=_op_code(op, average),
                              prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                              process_set=process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    """Blocking in-place grouped allreduce; returns `tensors`."""
    return synchronize(grouped_allreduce_async_(tensors, None, name, _op_code(op, average),
                                                prescale_factor, postscale_factor, process_set))


# ---- allgather, broadcast (alltoall, reducescatter: tutti.torch.exchange) ---------


def allgather_async(tensor, name=None, process_set=None):
    """Starts an allgather: every rank's tensor concatenated along dim 0 in rank
    order. First dimensions may differ per rank; the others must match (else
    MismatchError on every rank); a 0-dimensional tensor is InvalidArgumentError."""
    ps_id = _process_set_id(process_set)
    _check_tensor(tensor)
    inp = _contiguous(tensor)
    return _register([_enqueue_allgather(inp, name, ps_id)], (inp,),
                     lambda hs: _output_tensor(hs[0], inp.device))


def _enqueue_allgather(inp, name, ps_id=0):
    handle = _library.c_handle()
    d = _desc(inp)
    _library.check(_library.function("tutti_allgather_async_opts")(
        ctypes.byref(d), _encode(name), _options(ps_id), ctypes.byref(handle)))
    return handle.value


def allgather(tensor, name=None, process_set=None):
    """Blocking allgather; returns a new tensor of first dimension sum(d0 over
    ranks). Differentiable (tutti.torch.autograd: Horovod's gradient, this
    rank's rows of the averaged output gradient)."""
    from tutti.torch import autograd

    return autograd.allgather([tensor], False, name, process_set)[0]


def _broadcast_enqueue(inp, out, root_rank, name, ps_id=0):
    handle = _library.c_handle()
    d_in = _desc(inp)
    d_out = d_in if out is inp else _desc(out)
    _library.check(_library.function("tutti_broadcast_async_opts")(
        ctypes.byref(d_in), ctypes.byref(d_out), int(root_rank), _encode(name), _options(ps_id),
        ctypes.byref(handle)))
    return handle.value


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    """Starts a broadcast of root_rank's tensor into a new tensor on every rank.
    Ranks naming different roots get MismatchError."""
    ps_id = _process_set_id(process_set)
    _check_tensor(tensor)
    inp = _contiguous(tensor)
    out = torch.empty_like(inp, memory_format=torch.contiguous_format)
    h = _broadcast_enqueue(inp, out, root_rank, name, ps_id)
    return _register([h], (inp, out), lambda hs: out)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """In-place broadcast_async: synchronize() writes root's values into `tensor`."""
    ps_id = _process_set_id(process_set)
    _check_tensor(tensor)
    buf = _contiguous(tensor)
    h = _broadcast_enqueue(buf, buf, root_rank, name, ps_id)
    if buf is tensor:
        return _register([h], (tensor,), lambda hs: tensor)
    return _register([h], (tensor, buf), lambda hs: tensor.copy_(buf))


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Blocking broadcast into a new tensor. Differentiable (tutti.torch.autograd:
    the averaged output gradient on the root, zero elsewhere)."""
    from tutti.torch import autograd

    return autograd.broadcast(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Blocking in-place broadcast; returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- barrier, join, handles ---------------------------------------------------------


def barrier(process_set=None):
    """Returns once every rank (of process_set: every member) entered the barrier."""
    ps_id = _process_set_id(process_set)
    handle = _library.c_handle()
    _library.check(_library.function("tutti_barrier_async_opts")(_options(ps_id),
                                                                 ctypes.byref(handle)))
    synchronize(_register([handle.value], (), lambda hs: None))


def join(device=-1):
    """This rank has no more data: until every rank joined, it takes part in the
    others' allreduces and reducescatters with zeros (an Average still divides
    by size()); an allgather, broadcast or alltoall meanwhile raises
    MismatchError (a HorovodInternalError) on the ranks that call it. Returns
    the last rank to join (the same on every rank), as Horovod's. `device` is
    accepted for Horovod compatibility and ignored."""
    del device
    handle = _library.c_handle()
    _library.check(_lib().tutti_join_async(ctypes.byref(handle)))

    def finish(hs):
        last = ctypes.c_int()
        _library.check(_lib().tutti_handle_join_result(hs[0], ctypes.byref(last)))
        return last.value

    return synchronize(_register([handle.value], (), finish))


def poll(handle):
    """True once the op of `handle` completed (successfully or not). Never blocks.
    Raises InvalidArgumentError for an unknown handle."""
    with _lock:
        pending = _pending.get(handle)
    if pending is None:
        raise InvalidArgumentError("unknown handle %r (already synchronized?)" % (handle,), 1)
    lib = _lib()
    for h in pending.c_handles:
        rc = lib.tutti_poll(h)
        if rc < 0:
            raise error_for(-rc, _library.last_error())
        if rc == 0:
            return False
    return True


_wait = _handles.wait  # (lib, c_handle) -> (status, message); see tutti.torch._handles


def c_handles_of(handle):
    """The libtutti C handles of `handle` (one; several for a grouped op), for
    waiting on them in other ways (tutti.torch.distributed's completion
    callbacks) before synchronize(handle). InvalidArgumentError when unknown."""
    with _lock:
        pending = _pending.get(handle)
    if pending is None:
        raise InvalidArgumentError("unknown handle %r (already synchronized?)" % (handle,), 1)
    return pending.c_handles


def synchronize(handle):
    """Waits for the op of `handle` and returns its result (the output tensor,
    the in-place tensor, a list for grouped ops, (output, splits) for
    alltoall_async). Releases the handle. Raises the op's TuttiError (e.g.
    MismatchError, PeerLostError) with the core's message."""
    with _lock:
        pending = _pending.get(handle)
    if pending is None:
        raise InvalidArgumentError("unknown handle %r (already synchronized?)" % (handle,), 1)
    lib = _lib()
    error = None
    for h in pending.c_handles:  # wait for all before releasing any
        rc, message = _wait(lib, h)
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


def _process_set_id(process_set):
    """The libtutti id of process_set= (None: the global set); InvalidArgumentError
    (a ValueError) for an unregistered set or another object, before any enqueue."""
    return _process_sets.process_set_id(process_set)


_check_process_set = _process_set_id  # the name used before process sets existed


# Alltoall and reducescatter live in tutti.torch.exchange (which imports the
# helpers above, hence the import at the end); re-exported here so that
# tutti.torch.ops.alltoall_async etc. keep working.
from tutti.torch.exchange import (  # noqa: E402,F401 (re-exported)
    _enqueue_reducescatter,
    alltoall,
    alltoall_async,
    reducescatter,
    reducescatter_async,
)

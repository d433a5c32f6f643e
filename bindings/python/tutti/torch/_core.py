"""The private low layer of tutti.torch: libtutti's handle, the dtype and
reduce-op codes, tensor checks and descriptors, op options, and one enqueue
function per C call of the collectives (tutti.h's tutti_*_async_opts).

Everything in tutti.torch sits on this module and tutti.torch._handles (the
handle registry); nothing here imports another tutti.torch module. The
enqueue functions take contiguous tensors (contiguous()) that the caller
keeps referenced until the op completes, and return the C handle (an int);
they raise the enqueue's TuttiError (InvalidArgumentError, DuplicateNameError,
NotInitializedError, ...). Thread-safety: every function may be called from
any thread.
"""

import ctypes
import threading
import warnings
from typing import Any, Dict, List, Optional, Sequence

import torch

from tutti import _library
from tutti import process_sets as _process_sets
from tutti.basics import built_with, size
from tutti.compression import native_spec as _compression_spec
from tutti.errors import InvalidArgumentError

# Reduce ops (values are tutti_reduce_op). Horovod's names.
Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4
Adasum = 5  # adaptive summation: allreduce only, float16/32/64, 2^k ranks (docs/adasum.md)

# torch dtype -> tutti_dtype, and back.
DTYPE_CODES: Dict[torch.dtype, int] = {
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
# torch 2.3 added uint16/uint32/uint64 (torch 1.13 has none of them).
for _code, _name in ((10, "uint16"), (11, "uint32"), (12, "uint64")):
    if isinstance(getattr(torch, _name, None), torch.dtype):
        DTYPE_CODES[getattr(torch, _name)] = _code
TORCH_DTYPES: Dict[int, torch.dtype] = {code: dtype for dtype, code in DTYPE_CODES.items()}


def lib() -> Any:
    """The loaded libtutti (tutti._library.load())."""
    return _library.load()


def encode(name: Optional[object]) -> Optional[bytes]:
    """An op name as the C string libtutti takes (None: the runtime names it)."""
    if name is None:
        return None
    name = str(name)
    if "\0" in name:
        raise InvalidArgumentError(
            "tensor name %r contains a NUL character; names are C strings" % name, 1)
    return name.encode("utf-8")


def check_tensor(tensor: Any, what: str = "tensor") -> None:
    """InvalidArgumentError unless `tensor` is a dense torch.Tensor of a
    supported dtype on a device this build runs (CPU; CUDA with CUDA)."""
    if not torch.is_tensor(tensor):
        raise InvalidArgumentError(
            "%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__), 1)
    if tensor.dtype not in DTYPE_CODES:
        raise InvalidArgumentError(
            "Tensor type %s is not supported. (%s has dtype %s; tutti supports %s)"
            % (tensor.type(), what, tensor.dtype, ", ".join(str(d) for d in DTYPE_CODES)), 1)
    if tensor.is_sparse:
        raise InvalidArgumentError("%s is sparse; convert it with .to_dense()" % what, 1)
    if tensor.device.type != "cpu" and not (tensor.device.type == "cuda" and built_with("cuda")):
        raise InvalidArgumentError(
            "%s is on %s; this build of tutti supports CPU%s tensors"
            % (what, tensor.device, " and CUDA" if built_with("cuda") else " (not CUDA)"), 1)


def contiguous(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor with tensor's values (tensor itself when it already is)."""
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def desc(tensor: torch.Tensor) -> Any:
    """A TensorDesc for a contiguous tensor; the descriptor keeps its shape array alive."""
    shape = (ctypes.c_int64 * tensor.dim())(*tensor.shape)
    device = 1 if tensor.device.type == "cuda" else 0
    device_id = tensor.device.index if device == 1 else -1
    if device == 1:
        # The enqueue that follows on this thread orders after this stream.
        lib().tutti_set_cuda_stream(torch.cuda.current_stream(tensor.device).cuda_stream)
    ptr = tensor.data_ptr() if tensor.numel() > 0 else None
    return _library.TensorDesc(ptr, DTYPE_CODES[tensor.dtype], tensor.dim(), shape, device,
                               device_id)


def op_code(op: Optional[int], average: Optional[bool] = None) -> int:
    """The reduce op of op= and Horovod's deprecated average= (as Horovod's
    handle_average_backwards_compatibility: op wins, both is a ValueError,
    average alone warns DeprecationWarning, neither is Average)."""
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


def check_adasum(op: int, process_set: Optional[object]) -> None:
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


def process_set_id(process_set: Optional[object]) -> int:
    """The libtutti id of process_set= (None: the global set); InvalidArgumentError
    (a ValueError) for an unregistered set or another object, before any enqueue."""
    return _process_sets.process_set_id(process_set)


def output_tensor(c_handle: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """Copies the runtime-sized output of a completed C handle into a new tensor
    (on `device` when given: CUDA ops' outputs come back in host memory)."""
    library = lib()
    d = _library.TensorDesc()
    _library.check(library.tutti_handle_output(c_handle, ctypes.byref(d)))
    shape = [d.shape[i] for i in range(d.ndim)]
    out = torch.empty(shape, dtype=TORCH_DTYPES[d.dtype])
    nbytes = out.numel() * out.element_size()
    _library.check(library.tutti_handle_output_copy(c_handle, out.data_ptr() if nbytes else None,
                                                    nbytes))
    if device is not None and device.type != "cpu":
        out = out.to(device)
    return out


def native_spec(compression: object) -> Optional[str]:
    """The C++ spec for compression= (None: the job default); a Python-side
    (Horovod-style) compressor is not accepted by the async ops."""
    spec, python_side = _compression_spec(compression)
    if python_side is not None:
        raise InvalidArgumentError(
            "compression=%r runs in Python: use allreduce()/grouped_allreduce(), or a "
            "tutti.Compression member here" % (compression,), 1)
    return spec


class _Lane(threading.local):
    ordered = False


_lane = _Lane()


class ordered_lane:  # noqa: N801 (used as a statement, like a function)
    """`with ordered_lane():` the ops this thread enqueues inside take tutti's
    ordered lane (tutti.h, tutti_op_options.ordered): the caller promises the
    same order on every rank of the set, as torch.distributed does."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = _lane.ordered
        _lane.ordered = True

    def __exit__(self, *exc: object) -> None:
        _lane.ordered = self._before


def options(ps_id: int, compression: object = None) -> Any:
    """A tutti_op_options (by reference) for process set ps_id, and
    compression= of an allreduce; ordered inside `with ordered_lane()`."""
    spec = None if compression is None else encode(native_spec(compression))
    return ctypes.byref(_library.op_options(ps_id, spec, _lane.ordered))


# ---- enqueue: one C call each; the C handle back -----------------------------------


def enqueue_allreduce(inp: torch.Tensor, out: torch.Tensor, name: Optional[object], op: int,
                      prescale_factor: float, postscale_factor: float,
                      compression: object = None, ps_id: int = 0) -> int:
    handle = _library.c_handle()
    d_in = desc(inp)
    d_out = d_in if out is inp else desc(out)
    _library.check(_library.function("tutti_allreduce_async_opts")(
        ctypes.byref(d_in), ctypes.byref(d_out), encode(name), op, float(prescale_factor),
        float(postscale_factor), options(ps_id, compression), ctypes.byref(handle)))
    return handle.value


def enqueue_grouped_allreduce(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
                              name: Optional[object], op: int, prescale_factor: float,
                              postscale_factor: float, compression: object = None,
                              ps_id: int = 0) -> List[int]:
    """One C handle per tensor, negotiated and fused as one group."""
    n = len(inputs)
    d_in = (_library.TensorDesc * n)(*[desc(t) for t in inputs])
    d_out = (_library.TensorDesc * n)(*[desc(t) for t in outputs])
    handles = (_library.c_handle * n)()
    _library.check(_library.function("tutti_grouped_allreduce_async_opts")(
        n, d_in, d_out, encode(name), op, float(prescale_factor), float(postscale_factor),
        options(ps_id, compression), handles))
    return list(handles)


def enqueue_allgather(inp: torch.Tensor, name: Optional[object], ps_id: int = 0) -> int:
    handle = _library.c_handle()
    d = desc(inp)
    _library.check(_library.function("tutti_allgather_async_opts")(
        ctypes.byref(d), encode(name), options(ps_id), ctypes.byref(handle)))
    return handle.value


def enqueue_allgather_into(inp: torch.Tensor, out: torch.Tensor, name: Optional[object],
                           ps_id: int = 0) -> int:
    """tutti_allgather_into_async_opts: the result goes into `out` when it holds
    exactly every rank's rows (has_output() is then False)."""
    handle = _library.c_handle()
    d_in = desc(inp)
    d_out = desc(out)
    _library.check(_library.function("tutti_allgather_into_async_opts")(
        ctypes.byref(d_in), ctypes.byref(d_out), encode(name), options(ps_id),
        ctypes.byref(handle)))
    return handle.value


def has_output(c_handle: int) -> bool:
    """Whether a completed C handle holds a runtime-sized output."""
    d = _library.TensorDesc()
    return lib().tutti_handle_output(c_handle, ctypes.byref(d)) == 0


def enqueue_broadcast(inp: torch.Tensor, out: torch.Tensor, root_rank: int,
                      name: Optional[object], ps_id: int = 0) -> int:
    handle = _library.c_handle()
    d_in = desc(inp)
    d_out = d_in if out is inp else desc(out)
    _library.check(_library.function("tutti_broadcast_async_opts")(
        ctypes.byref(d_in), ctypes.byref(d_out), int(root_rank), encode(name), options(ps_id),
        ctypes.byref(handle)))
    return handle.value


def enqueue_alltoall(inp: torch.Tensor, splits: Optional[Sequence[int]],
                     name: Optional[object], ps_id: int = 0) -> int:
    """splits: checked ints (rows per rank), or None for an even division."""
    n = 0 if splits is None else len(splits)
    c_splits = None if splits is None else (ctypes.c_int64 * n)(*splits)
    handle = _library.c_handle()
    d = desc(inp)
    _library.check(_library.function("tutti_alltoall_async_opts")(
        ctypes.byref(d), c_splits, n, encode(name), options(ps_id), ctypes.byref(handle)))
    return handle.value


def enqueue_reducescatter(inp: torch.Tensor, name: Optional[object], op: int,
                          prescale_factor: float, postscale_factor: float,
                          ps_id: int = 0) -> int:
    handle = _library.c_handle()
    d = desc(inp)
    _library.check(_library.function("tutti_reducescatter_async_opts")(
        ctypes.byref(d), encode(name), op, float(prescale_factor), float(postscale_factor),
        options(ps_id), ctypes.byref(handle)))
    return handle.value

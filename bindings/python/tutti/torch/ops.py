"""Collectives on PyTorch tensors, over libtutti's C API (Horovod's torch API).

Every op has an asynchronous form returning a handle (an int) and a blocking
form (= async + synchronize). Tensors: CPU, or CUDA when tutti was built
with CUDA (built_with("cuda")); an op on a CUDA tensor is ordered after the
work queued on the tensor device's current stream (torch.cuda.current_stream())
and synchronize() returns once tutti's device work finished; allgather,
alltoall and reducescatter results come back on the input's device. Any
shape, any dtype of
uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool
(and uint16, uint32, uint64 on torch >= 2.3).
Non-contiguous inputs are copied to contiguous buffers; in-place ops (the
ones ending in "_") copy the result back into the caller's tensor.
This module is the collectives' public face: the asynchronous ops come from
tutti.torch._async_ops, tutti.torch.exchange (alltoall, reducescatter) and
tutti.torch.grouped (grouped allgather, reducescatter), the handles from
tutti.torch._handles; the blocking ops defined here run through
tutti.torch.autograd's Functions.

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

from typing import List, Optional, Sequence, Tuple, Union

import torch

from tutti.compression import Compression
from tutti.process_sets import global_process_set  # noqa: F401 (re-exported)
from tutti.torch import _core, autograd
from tutti.torch._async_ops import (  # noqa: F401 (re-exported)
    allgather_async,
    allreduce_async,
    allreduce_async_,
    barrier,
    broadcast_async,
    broadcast_async_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    join,
)
from tutti.torch._core import Adasum, Average, Max, Min, Product, Sum, op_code  # noqa: F401
from tutti.torch._handles import c_handles_of, poll, synchronize  # noqa: F401 (re-exported)
from tutti.torch.exchange import alltoall_async, reducescatter_async  # noqa: F401
from tutti.torch.grouped import (  # noqa: F401 (re-exported)
    grouped_allgather_async,
    grouped_reducescatter_async,
)

_Set = Optional[object]  # None, global_process_set or a registered tutti.ProcessSet


def bytes_sent() -> int:
    """Bytes this rank was asked to send by tutti's collectives since init()
    (compressed sizes for compressed allreduces; ring-aware). 0 when not
    initialised. For benchmarks: the difference across a training step."""
    return int(_core.lib().tutti_bytes_sent())


# ---- allreduce ------------------------------------------------------------------


def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression: object = Compression.none, op: Optional[int] = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: _Set = None) -> torch.Tensor:
    """Blocking allreduce into a new tensor (see allreduce_async). compression:
    a tutti.Compression member or spec string (run in C++; default none), None
    (the job default), or a Horovod-style object with compress/decompress (run
    in Python). Differentiable (tutti.torch.autograd: Horovod's gradients)."""
    return autograd.allreduce([tensor], False, name, compression, op=op_code(op, average),
                              prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                              process_set=process_set)[0]


def allreduce_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
               op: Optional[int] = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0, process_set: _Set = None) -> torch.Tensor:
    """Blocking in-place allreduce; returns `tensor`."""
    # average= is resolved here so that its DeprecationWarning names the caller.
    return synchronize(allreduce_async_(tensor, None, name, op_code(op, average),
                                        prescale_factor, postscale_factor, process_set))


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                      name: Optional[str] = None, compression: object = Compression.none,
                      op: Optional[int] = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: _Set = None) -> List[torch.Tensor]:
    """Blocking grouped allreduce; returns a list of new tensors. compression:
    as allreduce(). Differentiable (tutti.torch.autograd)."""
    return autograd.allreduce(tensors, True, name, compression, op=op_code(op, average),
                              prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                              process_set=process_set)


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                       name: Optional[str] = None, op: Optional[int] = None,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: _Set = None) -> List[torch.Tensor]:
    """Blocking in-place grouped allreduce; returns `tensors`."""
    return synchronize(grouped_allreduce_async_(tensors, None, name, op_code(op, average),
                                                prescale_factor, postscale_factor, process_set))


# ---- allgather, broadcast ---------------------------------------------------------


def allgather(tensor: torch.Tensor, name: Optional[str] = None,
              process_set: _Set = None) -> torch.Tensor:
    """Blocking allgather; returns a new tensor of first dimension sum(d0 over
    ranks). Differentiable (tutti.torch.autograd: Horovod's gradient, this
    rank's rows of the averaged output gradient)."""
    return autograd.allgather([tensor], False, name, process_set)[0]


def grouped_allgather(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                      process_set: _Set = None) -> List[torch.Tensor]:
    """Blocking grouped_allgather_async (tutti.torch.grouped); returns the list
    of gathered tensors. Differentiable (tutti.torch.autograd: Horovod's
    gradients)."""
    return autograd.allgather(tensors, True, name, process_set)


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
              process_set: _Set = None) -> torch.Tensor:
    """Blocking broadcast into a new tensor. Differentiable (tutti.torch.autograd:
    the averaged output gradient on the root, zero elsewhere)."""
    return autograd.broadcast(tensor, root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
               process_set: _Set = None) -> torch.Tensor:
    """Blocking in-place broadcast; returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall, reducescatter (async forms: tutti.torch.exchange, .grouped) --------


def alltoall(tensor: torch.Tensor, splits: Union[None, torch.Tensor, Sequence[int]] = None,
             name: Optional[str] = None, process_set: _Set = None
             ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Blocking alltoall (see alltoall_async). Returns the output tensor, or
    (output, received_splits) when `splits` was given (Horovod's convention).
    Differentiable (tutti.torch.autograd)."""
    out, received = autograd.alltoall(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


def reducescatter(tensor: torch.Tensor, name: Optional[str] = None, compression: object = None,
                  op: Optional[int] = None, process_set: _Set = None,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Blocking reducescatter (see reducescatter_async); returns this rank's
    rows of the reduction. compression: tutti's C++ compressors apply to
    allreduce only, so a tutti.Compression member (or None) leaves
    reducescatter uncompressed; a Horovod-style Python compressor runs around
    it. Differentiable (tutti.torch.autograd)."""
    return autograd.reducescatter([tensor], False, name, compression, op=op_code(op),
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)[0]


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                          compression: object = None, op: Optional[int] = None,
                          process_set: _Set = None, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[torch.Tensor]:
    """Blocking grouped_reducescatter_async (tutti.torch.grouped); returns the
    list of outputs. compression: as reducescatter (a tutti.Compression member
    or None leaves it uncompressed; a Horovod-style Python compressor runs
    around each tensor). Differentiable (tutti.torch.autograd)."""
    return autograd.reducescatter(tensors, True, name, compression, op=op_code(op),
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)

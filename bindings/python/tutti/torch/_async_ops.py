"""The asynchronous allreduce, grouped allreduce, allgather and broadcast,
and barrier and join, on tutti.torch._core (Horovod's *_async ops). Each
checks its arguments, enqueues, and returns a handle for poll() and
synchronize() (tutti.torch._handles). tutti.torch.ops re-exports them next to
their blocking forms; tensors, names, process sets, errors and thread-safety
are as its module docstring says.
"""

import ctypes
from typing import List, Optional, Sequence

import torch

from tutti import _library
from tutti.compression import Compression
from tutti.errors import InvalidArgumentError
from tutti.torch import _core
from tutti.torch._core import (
    check_adasum,
    check_tensor,
    contiguous,
    enqueue_allgather,
    enqueue_allgather_into,
    enqueue_allreduce,
    enqueue_broadcast,
    enqueue_grouped_allreduce,
    has_output,
    op_code,
    output_tensor,
    process_set_id,
)
from tutti.torch._handles import register, synchronize

_Set = Optional[object]  # None, global_process_set or a registered tutti.ProcessSet


def allreduce_async(tensor: torch.Tensor, average: Optional[bool] = None,
                    name: Optional[str] = None, op: Optional[int] = None,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: _Set = None, compression: object = Compression.none) -> int:
    """Starts an allreduce of `tensor` into a new tensor (same shape and dtype).

    Result: postscale_factor * op(prescale_factor * tensor over ranks). op:
    Average (default), Sum, Min, Max, Product; bool tensors allow Sum/Min/Max/
    Product as logical ops; integer tensors are scaled in float64 and truncated
    toward zero, per rank for prescale_factor, and an integer Average is the
    sum divided by size() truncated (75 over 2 ranks -> 37, -75 -> -37), as
    Horovod's.
    compression: a tutti.Compression member (none, fp16, bf16, topk(r),
    int8(b), cross_host()) or a spec string, run on tutti's background thread for Sum/Average
    of float tensors. Default Compression.none, as Horovod's; None = the job's
    default (TUTTI_COMPRESSION), which DistributedOptimizer uses for gradients.
    Returns a handle for poll()/synchronize(). Raises TuttiError subclasses.
    """
    ps_id = process_set_id(process_set)
    check_tensor(tensor)
    op = op_code(op, average)
    check_adasum(op, process_set)
    inp = contiguous(tensor)
    out = torch.empty_like(inp, memory_format=torch.contiguous_format)
    h = enqueue_allreduce(inp, out, name, op, prescale_factor, postscale_factor, compression,
                          ps_id)
    return register([h], (inp, out), lambda hs: out)


def allreduce_async_(tensor: torch.Tensor, average: Optional[bool] = None,
                     name: Optional[str] = None, op: Optional[int] = None,
                     prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: _Set = None, compression: object = Compression.none) -> int:
    """In-place allreduce_async: the result is written into `tensor` by synchronize()."""
    ps_id = process_set_id(process_set)
    check_tensor(tensor)
    op = op_code(op, average)
    check_adasum(op, process_set)
    buf = contiguous(tensor)
    h = enqueue_allreduce(buf, buf, name, op, prescale_factor, postscale_factor, compression,
                          ps_id)
    if buf is tensor:
        return register([h], (tensor,), lambda hs: tensor)
    return register([h], (tensor, buf), lambda hs: tensor.copy_(buf))


def _group(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The list of a grouped allreduce's tensors, each checked."""
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgumentError("grouped_allreduce needs at least one tensor", 1)
    for i, t in enumerate(tensors):
        check_tensor(t, "tensors[%d]" % i)
    return tensors


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                            name: Optional[str] = None, op: Optional[int] = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: _Set = None,
                            compression: object = Compression.none) -> int:
    """Starts allreduces of a list of tensors negotiated and fused as one group
    (none starts before all are ready on every rank). One handle for the group;
    synchronize() returns the list of new tensors. compression: as allreduce_async."""
    ps_id = process_set_id(process_set)
    tensors = _group(tensors)
    op = op_code(op, average)
    check_adasum(op, process_set)
    inputs = [contiguous(t) for t in tensors]
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in inputs]
    hs = enqueue_grouped_allreduce(inputs, outputs, name, op, prescale_factor, postscale_factor,
                                   compression, ps_id)
    return register(hs, (inputs, outputs), lambda _: outputs)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                             name: Optional[str] = None, op: Optional[int] = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: _Set = None,
                             compression: object = Compression.none) -> int:
    """In-place grouped_allreduce_async; synchronize() returns the list `tensors`."""
    ps_id = process_set_id(process_set)
    tensors = _group(tensors)
    op = op_code(op, average)
    check_adasum(op, process_set)
    bufs = [contiguous(t) for t in tensors]
    hs = enqueue_grouped_allreduce(bufs, bufs, name, op, prescale_factor, postscale_factor,
                                   compression, ps_id)

    def finish(_: List[int]) -> List[torch.Tensor]:
        for t, b in zip(tensors, bufs):
            if b is not t:
                t.copy_(b)
        return tensors

    return register(hs, (tensors, bufs), finish)


def allgather_async(tensor: torch.Tensor, name: Optional[str] = None,
                    process_set: _Set = None) -> int:
    """Starts an allgather: every rank's tensor concatenated along dim 0 in rank
    order. First dimensions may differ per rank; the others must match (else
    MismatchError on every rank); a 0-dimensional tensor is InvalidArgumentError."""
    ps_id = process_set_id(process_set)
    check_tensor(tensor)
    inp = contiguous(tensor)
    return register([enqueue_allgather(inp, name, ps_id)], (inp,),
                    lambda hs: output_tensor(hs[0], inp.device))


def allgather_into_async(tensor: torch.Tensor, output: torch.Tensor, name: Optional[str] = None,
                         process_set: _Set = None) -> int:
    """allgather_async whose result is written straight into `output` (CPU,
    contiguous, the input's dtype) when `output` holds exactly every rank's
    rows: synchronize() then returns `output` itself. Otherwise (another
    size, a CUDA or non-contiguous tensor) synchronize() returns the result as
    a new tensor, as allgather_async's, and `output` is untouched."""
    ps_id = process_set_id(process_set)
    check_tensor(tensor)
    inp = contiguous(tensor)
    direct = (inp.device.type == "cpu" and output.device.type == "cpu"
              and output.is_contiguous() and output.dtype == inp.dtype)
    if not direct:
        return allgather_async(inp, name, process_set)
    h = enqueue_allgather_into(inp, output, name, ps_id)
    return register([h], (inp, output),
                    lambda hs: output_tensor(hs[0], inp.device) if has_output(hs[0]) else output)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                    process_set: _Set = None) -> int:
    """Starts a broadcast of root_rank's tensor into a new tensor on every rank.
    Ranks naming different roots get MismatchError."""
    ps_id = process_set_id(process_set)
    check_tensor(tensor)
    inp = contiguous(tensor)
    out = torch.empty_like(inp, memory_format=torch.contiguous_format)
    h = enqueue_broadcast(inp, out, root_rank, name, ps_id)
    return register([h], (inp, out), lambda hs: out)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                     process_set: _Set = None) -> int:
    """In-place broadcast_async: synchronize() writes root's values into `tensor`."""
    ps_id = process_set_id(process_set)
    check_tensor(tensor)
    buf = contiguous(tensor)
    h = enqueue_broadcast(buf, buf, root_rank, name, ps_id)
    if buf is tensor:
        return register([h], (tensor,), lambda hs: tensor)
    return register([h], (tensor, buf), lambda hs: tensor.copy_(buf))


def barrier(process_set: _Set = None) -> None:
    """Returns once every rank (of process_set: every member) entered the barrier."""
    ps_id = process_set_id(process_set)
    handle = _library.c_handle()
    _library.check(_library.function("tutti_barrier_async_opts")(_core.options(ps_id),
                                                                 ctypes.byref(handle)))
    synchronize(register([handle.value], (), lambda hs: None))


def join(device: int = -1) -> int:
    """This rank has no more data: until every rank joined, it takes part in the
    others' allreduces and reducescatters with zeros (an Average still divides
    by size()); an allgather, broadcast or alltoall meanwhile raises
    MismatchError (a HorovodInternalError) on the ranks that call it. Returns
    the last rank to join (the same on every rank), as Horovod's. `device` is
    accepted for Horovod compatibility and ignored."""
    del device
    handle = _library.c_handle()
    _library.check(_core.lib().tutti_join_async(ctypes.byref(handle)))

    def finish(hs: List[int]) -> int:
        last = ctypes.c_int()
        _library.check(_core.lib().tutti_handle_join_result(hs[0], ctypes.byref(last)))
        return last.value

    return synchronize(register([handle.value], (), finish))

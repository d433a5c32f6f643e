"""torch.distributed collectives as tutti ops (used by ProcessGroupTutti).

Each builder checks its arguments (RuntimeError naming the op, what was
wrong and what is accepted) and returns (start, finish): start(name,
process_set) enqueues exactly one tutti op and returns its handle;
finish(result) takes what tutti.torch.ops.synchronize(handle) returned,
writes torch's outputs and returns them.

How each op maps onto tutti (one tutti op each):
- all_reduce SUM/AVG/MIN/MAX/PRODUCT: tutti allreduce in place.
- all_reduce BAND/BOR/BXOR (integer and bool tensors): tutti has no bitwise
  reduction, so every rank's tensor is allgathered and folded locally in
  rank order (exact; size() times the bytes of an allreduce).
- reduce: an allreduce whose result only the root keeps.
- all_gather, _all_gather_base: a tutti allgather of the flattened input.
- gather: an alltoall in which every rank sends its tensor to the root only.
- scatter: an alltoall in which the root sends chunk p to rank p.
- reduce_scatter, _reduce_scatter_base: a tutti reducescatter of the inputs
  stacked as [size, n] (row r goes to rank r); bitwise ops: the bitwise
  allreduce above, row r kept.
- all_to_all_single: a tutti alltoall with the input split sizes (rows).
- all_to_all: a tutti alltoall of the flattened inputs, split by element counts.
- barrier: tutti's barrier.
"""

import ctypes
import functools

import torch
import torch.distributed as dist

from tutti import _library
from tutti.torch import ops

_R = dist.ReduceOp.RedOpType
_ARITHMETIC = {_R.SUM: ops.Sum, _R.AVG: ops.Average, _R.MIN: ops.Min, _R.MAX: ops.Max,
               _R.PRODUCT: ops.Product}
_BITWISE = {_R.BAND: torch.bitwise_and, _R.BOR: torch.bitwise_or, _R.BXOR: torch.bitwise_xor}


def reduce_op(op, what):
    """torch's ReduceOp -> a tutti op code (int) or a bitwise torch function."""
    kind = op.op if hasattr(op, "op") else op
    if kind in _ARITHMETIC:
        return _ARITHMETIC[kind]
    if kind in _BITWISE:
        return _BITWISE[kind]
    raise RuntimeError("tutti backend: %s with %s; accepted: SUM, AVG, PRODUCT, MIN, MAX, and "
                       "BAND, BOR, BXOR on integer or bool tensors" % (what, kind))


def _check_bitwise(tensor, op, what):
    if callable(op) and (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
        raise RuntimeError("tutti backend: %s with a bitwise op on a %s tensor; BAND, BOR and "
                           "BXOR take integer or bool tensors" % (what, tensor.dtype))


def check_count(tensors, size, what, which):
    if len(tensors) != size:
        raise RuntimeError("tutti backend: %s got %d %s; expected one per rank (%d)"
                           % (what, len(tensors), which, size))


def check_numel(tensor, numel, what):
    if tensor.numel() != numel:
        raise RuntimeError("tutti backend: %s has %d elements; expected %d (shape %s)"
                           % (what, tensor.numel(), numel, list(tensor.shape)))


def _check_like(tensors, ref, what):
    for i, t in enumerate(tensors):
        if t.dtype != ref.dtype:
            raise RuntimeError("tutti backend: %s: tensor %d has dtype %s; expected %s like the "
                               "input" % (what, i, t.dtype, ref.dtype))


def _fold(op, gathered):
    """Bitwise reduction of gathered [size, ...] rows, in rank order."""
    return functools.reduce(op, gathered.unbind(0))


def _bitwise_start(tensor, name, ps):
    return ops.allgather_async(tensor.reshape(1, tensor.numel()), name=name, process_set=ps)


def allreduce(tensor, op):
    _check_bitwise(tensor, op, "all_reduce")
    if callable(op):
        def finish(gathered):
            return tensor.copy_(_fold(op, gathered).view(tensor.shape))

        return (lambda name, ps: _bitwise_start(tensor, name, ps)), finish
    return ((lambda name, ps: ops.allreduce_async_(tensor, name=name, op=op, process_set=ps)),
            lambda result: tensor)


def allreduce_coalesced(tensors, op):
    if callable(op):
        raise RuntimeError("tutti backend: all_reduce_coalesced takes SUM, AVG, PRODUCT, MIN or "
                           "MAX (bitwise ops: call all_reduce per tensor)")
    return ((lambda name, ps: ops.grouped_allreduce_async_(tensors, name=name, op=op,
                                                           process_set=ps)),
            lambda result: tensors)


def reduce(tensor, op, is_root):
    """The root's tensor gets the reduction; the others' stay unchanged."""
    _check_bitwise(tensor, op, "reduce")
    if callable(op):
        def finish(gathered):
            if is_root:
                tensor.copy_(_fold(op, gathered).view(tensor.shape))
            return tensor

        return (lambda name, ps: _bitwise_start(tensor, name, ps)), finish

    def finish_sum(result):
        if is_root:
            tensor.copy_(result)
        return tensor

    return ((lambda name, ps: ops.allreduce_async(tensor, name=name, op=op, process_set=ps)),
            finish_sum)


def gather_into(tensor, outputs, what):
    """allgather of tensor into outputs (one per rank, or one holding all)."""
    _check_like(outputs, tensor, what)

    def finish(gathered):
        check_numel(gathered, sum(o.numel() for o in outputs), what + " result")
        for out, part in zip(outputs, gathered.split([o.numel() for o in outputs])):
            out.copy_(part.view(out.shape))
        return outputs if len(outputs) > 1 else outputs[0]

    return (lambda name, ps: ops.allgather_async(tensor.reshape(-1), name=name,
                                                 process_set=ps)), finish


def _alltoall_start(flat, splits):
    return lambda name, ps: ops.alltoall_async(flat, splits, name=name, process_set=ps)


def gather(tensor, outputs, root, size):
    """Every rank sends its flattened tensor to root only; root splits the rows."""
    flat = tensor.reshape(-1)
    splits = [flat.numel() if p == root else 0 for p in range(size)]
    if outputs is not None:
        _check_like(outputs, tensor, "gather")

    def finish(result):
        received, counts = result
        if outputs is None:
            return []
        expected = [o.numel() for o in outputs]
        if counts.tolist() != expected:
            raise RuntimeError("tutti backend: gather: ranks sent %s elements; gather_list holds "
                               "%s" % (counts.tolist(), expected))
        for out, part in zip(outputs, received.split(expected)):
            out.copy_(part.view(out.shape))
        return outputs

    return _alltoall_start(flat, splits), finish


def scatter(out, chunks, root, size):
    """root sends chunk p (flattened) to rank p; the others send nothing."""
    if chunks is not None:
        _check_like(chunks, out, "scatter")
        flat = torch.cat([c.reshape(-1) for c in chunks])
        splits = [c.numel() for c in chunks]
    else:
        flat = out.new_empty([0])
        splits = [0] * size

    def finish(result):
        received, _ = result
        check_numel(received, out.numel(), "scatter: the chunk root sent to this rank")
        return out.copy_(received.view(out.shape))

    return _alltoall_start(flat, splits), finish


def reduce_scatter(out, inputs, op, rank, size):
    """inputs: a list of `size` tensors like out, or a [size, n] tensor."""
    if isinstance(inputs, (list, tuple)):
        _check_like(inputs, out, "reduce_scatter")
        for i, t in enumerate(inputs):
            check_numel(t, out.numel(), "reduce_scatter input %d" % i)
        rows = torch.stack([t.reshape(-1) for t in inputs])
    else:
        rows = inputs
    _check_bitwise(out, op, "reduce_scatter")
    if callable(op):
        def finish_bitwise(gathered):  # [size, size * n]: every rank's rows
            mine = _fold(op, gathered).view(size, -1)[rank]
            return out.copy_(mine.view(out.shape))

        return (lambda name, ps: _bitwise_start(rows, name, ps)), finish_bitwise
    return ((lambda name, ps: ops.reducescatter_async(rows, name=name, op=op, process_set=ps)),
            lambda result: out.copy_(result.view(out.shape)))


def alltoall_single(output, tensor, output_splits, input_splits, size):
    """all_to_all_single: rows of tensor (dim 0) by input_splits (empty: even)."""
    if tensor.dtype != output.dtype:
        raise RuntimeError("tutti backend: all_to_all_single: output dtype %s differs from the "
                           "input's %s" % (output.dtype, tensor.dtype))
    if not input_splits and tensor.dim() > 0 and tensor.shape[0] % size != 0:
        raise RuntimeError("tutti backend: all_to_all_single without split sizes needs dim 0 "
                           "(%d) divisible by the group size (%d)" % (tensor.shape[0], size))
    for what, s in (("input_split_sizes", input_splits), ("output_split_sizes", output_splits)):
        if s and len(s) != size:
            raise RuntimeError("tutti backend: all_to_all_single %s has %d entries; expected one "
                               "per rank (%d)" % (what, len(s), size))
    splits = input_splits or None

    def finish(result):
        received, counts = result
        if output_splits and counts.tolist() != output_splits:
            raise RuntimeError("tutti backend: all_to_all_single received %s rows per rank; "
                               "output_split_sizes says %s" % (counts.tolist(), output_splits))
        check_numel(received, output.numel(), "all_to_all_single output")
        return output.copy_(received.view(output.shape))

    return _alltoall_start(tensor, splits), finish


def alltoall(outputs, inputs):
    """all_to_all with tensor lists: flattened, split by element counts."""
    _check_like(inputs[1:] + outputs, inputs[0], "all_to_all")
    flat = torch.cat([t.reshape(-1) for t in inputs])
    splits = [t.numel() for t in inputs]

    def finish(result):
        received, counts = result
        expected = [o.numel() for o in outputs]
        if counts.tolist() != expected:
            raise RuntimeError("tutti backend: all_to_all received %s elements per rank; the "
                               "output tensors hold %s" % (counts.tolist(), expected))
        for out, part in zip(outputs, received.split(expected)):
            out.copy_(part.view(out.shape))
        return outputs

    return _alltoall_start(flat, splits), finish


def barrier_start(name, ps):
    """Enqueues tutti's barrier (it has no name: barriers match by order)."""
    del name
    handle = _library.c_handle()
    _library.check(_library.function("tutti_barrier_async_opts")(
        ops._options(ops._process_set_id(ps)), ctypes.byref(handle)))  # noqa: SLF001
    return ops._register([handle.value], (), lambda hs: None)  # noqa: SLF001

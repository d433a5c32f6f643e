"""torch.distributed collectives as tutti ops (used by ProcessGroupTutti).

Each builder checks its arguments (RuntimeError naming the op, what was
wrong and what is accepted) and returns (start, finish): start(name,
process_set) enqueues exactly one tutti op and returns its handle;
finish(result) takes what tutti.torch.ops.synchronize(handle) returned,
writes torch's outputs and returns them.

How each op maps onto tutti (one tutti op each):
- all_reduce SUM/AVG/MIN/MAX/PRODUCT: tutti allreduce in place; PREMUL_SUM(f)
  (torch 2.x): a Sum with prescale factor f.
- all_reduce BAND/BOR/BXOR (integer and bool tensors): tutti has no bitwise
  reduction, so every rank's tensor is allgathered and folded locally in
  rank order (exact; size() times the bytes of an allreduce).
- all_reduce_coalesced: one grouped allreduce.
- all_reduce of a sparse COO tensor (SUM, as gloo's; AVG too): tutti.torch's
  sparse allreduce (every rank's indices and values allgathered), coalesced
  into the tensor as gloo does.
- reduce: an allreduce whose result only the root keeps.
- all_gather, all_gather_into_tensor: a tutti allgather of the flattened input;
  their coalesced forms: one allgather of the inputs concatenated.
- gather: an alltoall in which every rank sends its tensor to the root only.
- scatter: an alltoall in which the root sends chunk p to rank p.
- reduce_scatter, reduce_scatter_tensor: a tutti reducescatter of the inputs
  stacked as [size, n] (row r goes to rank r); the coalesced form: one
  reducescatter of every input's row r concatenated; bitwise ops: the
  bitwise allreduce above, row r kept.
- all_to_all_single: a tutti alltoall with the input split sizes (rows).
- all_to_all: a tutti alltoall of the flattened inputs, split by element counts.
- barrier: tutti's barrier.
Data movement (all_gather, broadcast, the all_to_alls, gather, scatter) moves
tensors of dtypes tutti does not reduce (float8, uint16/32/64) as integers of
the same width: bytes are bytes.
"""

import collections
import ctypes
import functools

import torch
import torch.distributed as dist

from tutti import _library
from tutti.torch import _async_ops, _core, _handles, ops, sparse

_R = dist.ReduceOp.RedOpType
_ARITHMETIC = {_R.SUM: ops.Sum, _R.AVG: ops.Average, _R.MIN: ops.Min, _R.MAX: ops.Max,
               _R.PRODUCT: ops.Product}
_BITWISE = {_R.BAND: torch.bitwise_and, _R.BOR: torch.bitwise_or, _R.BXOR: torch.bitwise_xor}
_PREMUL_SUM = getattr(_R, "PREMUL_SUM", None)  # torch >= 1.13 builds with NCCL's premul sum
_SAME_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Reduction(collections.namedtuple("Reduction", "op prescale")):
    """A torch ReduceOp as tutti sees it: op is a tutti op code (int) or a
    bitwise torch function; prescale the factor every input is multiplied
    by first (PREMUL_SUM's; else 1.0)."""

    @property
    def bitwise(self):
        return callable(self.op)


def reduce_op(op, what):
    """torch's ReduceOp (or its RedOpType) -> a Reduction. RuntimeError for
    an op tutti cannot do, naming it and the accepted ones."""
    kind = op.op if hasattr(op, "op") else op
    if kind in _ARITHMETIC:
        return Reduction(_ARITHMETIC[kind], 1.0)
    if kind in _BITWISE:
        return Reduction(_BITWISE[kind], 1.0)
    if _PREMUL_SUM is not None and kind == _PREMUL_SUM:
        factor = getattr(op, "factor", None)
        if torch.is_tensor(factor):
            factor = factor.item()
        if factor is None:
            raise RuntimeError("tutti backend: %s with PREMUL_SUM whose factor this torch does "
                               "not expose; pass ReduceOp.PREMUL_SUM(factor)" % what)
        return Reduction(ops.Sum, float(factor))
    raise RuntimeError("tutti backend: %s with %s; accepted: SUM, AVG, PRODUCT, MIN, MAX, "
                       "PREMUL_SUM, and BAND, BOR, BXOR on integer or bool tensors" % (what, kind))


def movable(tensor):
    """tensor, or a view of its bytes as integers of its width when tutti
    cannot carry its dtype (float8, uint16...): for data movement only."""
    if tensor.dtype in _core.DTYPE_CODES:  # the binding's dtype table
        return tensor
    width = tensor.element_size()
    if width not in _SAME_WIDTH or tensor.is_complex():
        return tensor  # tutti's check names the dtype
    return tensor.view(_SAME_WIDTH[width])


def _check_bitwise(tensor, red, what):
    if red.bitwise and (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
        raise RuntimeError("tutti backend: %s with a bitwise op on a %s tensor; BAND, BOR and "
                           "BXOR take integer or bool tensors" % (what, tensor.dtype))


def one_tensor(tensors, op):
    if len(tensors) != 1:
        raise RuntimeError("tutti backend: %s takes one tensor per call (got a list of %d; "
                           "multi-device lists are not supported)" % (op, len(tensors)))
    return tensors[0]


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


def allreduce(tensor, red):
    _check_bitwise(tensor, red, "all_reduce")
    if red.bitwise:
        def finish(gathered):
            return tensor.copy_(_fold(red.op, gathered).view(tensor.shape))

        return (lambda name, ps: _bitwise_start(tensor, name, ps)), finish
    return ((lambda name, ps: ops.allreduce_async_(tensor, name=name, op=red.op,
                                                   prescale_factor=red.prescale,
                                                   process_set=ps)),
            lambda result: tensor)


def allreduce_sparse(tensor, red):
    """all_reduce of a sparse COO tensor: the coalesced sum (or average) of
    every rank's tensor replaces it, as gloo's (which takes SUM only)."""
    if red.bitwise or red.op not in (ops.Sum, ops.Average) or red.prescale != 1.0:
        raise RuntimeError("tutti backend: all_reduce of a sparse tensor takes SUM or AVG; got "
                           "%s" % ("PREMUL_SUM" if red.prescale != 1.0 else red.op))

    def finish(result):
        with torch.no_grad():
            tensor.copy_(result.coalesce())
        return tensor

    return ((lambda name, ps: sparse.sparse_allreduce_async(tensor, name=name, op=red.op,
                                                            process_set=ps)),
            finish)


def allreduce_coalesced(tensors, red):
    if red.bitwise:
        raise RuntimeError("tutti backend: all_reduce_coalesced takes SUM, AVG, PRODUCT, MIN, "
                           "MAX or PREMUL_SUM (bitwise ops: call all_reduce per tensor)")
    return ((lambda name, ps: ops.grouped_allreduce_async_(tensors, name=name, op=red.op,
                                                           prescale_factor=red.prescale,
                                                           process_set=ps)),
            lambda result: tensors)


def reduce(tensor, red, is_root):
    """The root's tensor gets the reduction; the others' stay unchanged."""
    _check_bitwise(tensor, red, "reduce")
    if red.bitwise:
        def finish(gathered):
            if is_root:
                tensor.copy_(_fold(red.op, gathered).view(tensor.shape))
            return tensor

        return (lambda name, ps: _bitwise_start(tensor, name, ps)), finish

    def finish_sum(result):
        if is_root:
            tensor.copy_(result)
        return tensor

    return ((lambda name, ps: ops.allreduce_async(tensor, name=name, op=red.op,
                                                  prescale_factor=red.prescale, process_set=ps)),
            finish_sum)


def broadcast(tensor, root):
    """start() of a broadcast in place from global rank root."""
    moved = movable(tensor)
    return lambda name, ps: ops.broadcast_async_(moved, root, name=name, process_set=ps)


def gather_into(tensor, outputs, what):
    """allgather of tensor into outputs (one per rank, or one holding all:
    then written straight into it when it is contiguous and of the right
    size, with no copy)."""
    _check_like(outputs, tensor, what)
    flat = movable(tensor.reshape(-1))
    one = len(outputs) == 1 and outputs[0].is_contiguous()
    # One output: the result goes straight into it; a list: into one flat
    # buffer (not zero-filled), then split into the outputs, as gloo does.
    target = (movable(outputs[0]).view(-1) if one
              else torch.empty(sum(o.numel() for o in outputs), dtype=flat.dtype))

    def finish(gathered):
        if gathered is not target:  # another size: the runtime's own output
            check_numel(gathered, target.numel(), what + " result")
            target.copy_(gathered.view(-1))
        if one:
            return outputs[0]
        for out, part in zip(outputs, target.split([o.numel() for o in outputs])):
            movable(out).copy_(part.view(out.shape))
        return outputs if len(outputs) > 1 else outputs[0]

    return ((lambda name, ps: _async_ops.allgather_into_async(flat, target, name=name,
                                                              process_set=ps)),
            finish)


def allgather_coalesced(outputs, inputs, size):
    """Coalesced all_gather_into_tensor: outputs[k] gets every rank's
    inputs[k] in rank order; one allgather of the inputs concatenated."""
    if len(outputs) != len(inputs):
        raise RuntimeError("tutti backend: all_gather_into_tensor_coalesced got %d outputs for "
                           "%d inputs" % (len(outputs), len(inputs)))
    _check_like(outputs + inputs[1:], inputs[0], "all_gather_into_tensor_coalesced")
    for k, (out, inp) in enumerate(zip(outputs, inputs)):
        check_numel(out, inp.numel() * size, "all_gather_into_tensor_coalesced output %d" % k)
    flat = movable(torch.cat([t.reshape(-1) for t in inputs]))
    counts = [t.numel() for t in inputs]

    def finish(gathered):  # [rank 0: in 0, in 1, ...][rank 1: ...]...
        for r, block in enumerate(gathered.view(size, -1)):
            for out, part in zip(outputs, block.split(counts)):
                movable(out).view(size, -1)[r].copy_(part)
        return outputs

    return (lambda name, ps: ops.allgather_async(flat, name=name, process_set=ps)), finish


def _alltoall_start(flat, splits):
    return lambda name, ps: ops.alltoall_async(flat, splits, name=name, process_set=ps)


def gather(tensor, outputs, root, size):
    """Every rank sends its flattened tensor to root only; root splits the rows."""
    flat = movable(tensor.reshape(-1))
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
            movable(out).copy_(part.view(out.shape))
        return outputs

    return _alltoall_start(flat, splits), finish


def scatter(out, chunks, root, size):
    """root sends chunk p (flattened) to rank p; the others send nothing."""
    if chunks is not None:
        _check_like(chunks, out, "scatter")
        flat = movable(torch.cat([c.reshape(-1) for c in chunks]))
        splits = [c.numel() for c in chunks]
    else:
        flat = movable(out.new_empty([0]))
        splits = [0] * size

    def finish(result):
        received, _ = result
        check_numel(received, out.numel(), "scatter: the chunk root sent to this rank")
        movable(out).copy_(received.view(out.shape))
        return out

    return _alltoall_start(flat, splits), finish


def reduce_scatter(out, inputs, red, rank, size):
    """inputs: a list of `size` tensors like out, or a [size, n] tensor."""
    if isinstance(inputs, (list, tuple)):
        _check_like(inputs, out, "reduce_scatter")
        for i, t in enumerate(inputs):
            check_numel(t, out.numel(), "reduce_scatter input %d" % i)
        rows = torch.stack([t.reshape(-1) for t in inputs])
    else:
        rows = inputs
    return _reduce_scatter_rows(rows, red, rank, size, lambda mine: out.copy_(mine.view(out.shape)))


def _reduce_scatter_rows(rows, red, rank, size, finish):
    """One reducescatter of rows [size, n] (row r to rank r); finish(row of this rank)."""
    _check_bitwise(rows, red, "reduce_scatter")
    if red.bitwise:
        def finish_bitwise(gathered):  # [size, size * n]: every rank's rows
            return finish(_fold(red.op, gathered).view(size, -1)[rank])

        return (lambda name, ps: _bitwise_start(rows, name, ps)), finish_bitwise
    return ((lambda name, ps: ops.reducescatter_async(rows, name=name, op=red.op,
                                                      prescale_factor=red.prescale,
                                                      process_set=ps)),
            lambda result: finish(result.view(-1)))


def reduce_scatter_coalesced(outputs, inputs, red, rank, size):
    """Coalesced reduce_scatter_tensor: rank r gets row r of every inputs[k]
    (viewed as [size, outputs[k].numel()]) reduced, in outputs[k]."""
    if len(outputs) != len(inputs):
        raise RuntimeError("tutti backend: reduce_scatter_tensor_coalesced got %d outputs for "
                           "%d inputs" % (len(outputs), len(inputs)))
    _check_like(outputs + inputs[1:], inputs[0], "reduce_scatter_tensor_coalesced")
    for k, (out, inp) in enumerate(zip(outputs, inputs)):
        check_numel(inp, out.numel() * size, "reduce_scatter_tensor_coalesced input %d" % k)
    rows = torch.cat([t.reshape(size, -1) for t in inputs], dim=1)
    counts = [o.numel() for o in outputs]

    def finish(mine):
        for out, part in zip(outputs, mine.split(counts)):
            out.copy_(part.view(out.shape))
        return outputs

    return _reduce_scatter_rows(rows, red, rank, size, finish)


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
        movable(output).copy_(received.view(output.shape))
        return output

    return _alltoall_start(movable(tensor), splits), finish


def alltoall(outputs, inputs):
    """all_to_all with tensor lists: flattened, split by element counts."""
    _check_like(inputs[1:] + outputs, inputs[0], "all_to_all")
    flat = movable(torch.cat([t.reshape(-1) for t in inputs]))
    splits = [t.numel() for t in inputs]

    def finish(result):
        received, counts = result
        expected = [o.numel() for o in outputs]
        if counts.tolist() != expected:
            raise RuntimeError("tutti backend: all_to_all received %s elements per rank; the "
                               "output tensors hold %s" % (counts.tolist(), expected))
        for out, part in zip(outputs, received.split(expected)):
            movable(out).copy_(part.view(out.shape))
        return outputs

    return _alltoall_start(flat, splits), finish


def barrier_start(name, ps):
    """Enqueues tutti's barrier (it has no name: barriers match by order)."""
    del name
    handle = _library.c_handle()
    _library.check(_library.function("tutti_barrier_async_opts")(
        _core.options(_core.process_set_id(ps)), ctypes.byref(handle)))
    return _handles.register([handle.value], (), lambda hs: None)

"""The blocking collectives as autograd Functions, with Horovod's gradient
conventions (horovod/torch/mpi_ops.py 0.28.1: HorovodAllreduce,
HorovodGroupedAllreduce, HorovodAllgather, HorovodGroupedAllgather,
HorovodBroadcast, HorovodAlltoall, HorovodReducescatter,
HorovodGroupedReducescatter). For an output gradient g on each rank:

- allreduce, grouped_allreduce: the same allreduce of g (op, prescale and
  postscale factors, compression).
- allgather, grouped_allgather: the Average-allreduce of g, then this rank's
  rows (Horovod averages, so this is 1/size() of the exact derivative of a
  loss summed over ranks).
- broadcast: the Average-allreduce of g on the root rank, zero elsewhere.
- alltoall: g sent back by an alltoall with the received splits.
- reducescatter, grouped_reducescatter: the allgather of g times
  prescale_factor * postscale_factor, and times size() for op=Sum; not
  divided for Average (so size() times the exact derivative in both cases).

tutti.torch's blocking ops always run through these Functions, as Horovod's
do: the result carries a grad_fn when grad mode is on and an input requires
grad. The backward collectives are the blocking ops themselves, unnamed (the
runtime's counter names them), on the forward's process set: every rank must
run backward over the same graph in the same order; create_graph=True makes
them differentiable again. Over a process set, size() above and the rank
whose rows allgather's gradient keeps are the set's (Horovod's
process_set.size() and .rank()); broadcast's root_rank stays global.
"""

import torch

from tutti import process_sets
from tutti.basics import rank
from tutti.compression import Compression, native_spec
from tutti.torch import grouped as _grouped
from tutti.torch import ops

_OPTIONS = 3  # leading non-tensor arguments of the Functions' forward


def _run(is_grouped, one, group, tensors, **kwargs):
    """[op `one` on tensors[0]], or the list of results of op `group` on the list."""
    return list(group(list(tensors), **kwargs)) if is_grouped else [one(tensors[0], **kwargs)]


def _synced(start):
    """The blocking form of an async op, for forward (the blocking ops would
    apply the Function again)."""
    return lambda *args, **kwargs: ops.synchronize(start(*args, **kwargs))


class AllreduceFunction(torch.autograd.Function):
    """allreduce (is_grouped: grouped_allreduce); gradient: the same op of the
    output gradients. options: op, the scale factors, process_set, compression."""

    @staticmethod
    def forward(ctx, is_grouped, name, options, *tensors):
        ctx.is_grouped, ctx.options = is_grouped, options
        return tuple(_run(is_grouped, _synced(ops.allreduce_async),
                          _synced(ops.grouped_allreduce_async), tensors,
                          name=name, **options))

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * _OPTIONS + tuple(_run(ctx.is_grouped, ops.allreduce,
                                                ops.grouped_allreduce, grads, **ctx.options))


class AllgatherFunction(torch.autograd.Function):
    """allgather (is_grouped: grouped_allgather); gradient: this rank's rows of
    the Average-allreduce of the output gradients. options: process_set."""

    @staticmethod
    def forward(ctx, is_grouped, name, options, *tensors):
        outs = _run(is_grouped, _synced(ops.allgather_async),
                    _synced(_grouped.grouped_allgather_async), tensors, name=name, **options)
        ctx.is_grouped, ctx.options = is_grouped, options
        ctx.rows = [t.shape[0] for t in tensors]
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        reduced = _run(ctx.is_grouped, ops.allreduce, ops.grouped_allreduce, grads,
                       op=ops.Average, **ctx.options)
        every = ops.allgather(torch.tensor([ctx.rows], dtype=torch.int64), **ctx.options)
        offsets = every[:process_sets.set_rank(ctx.options["process_set"])].sum(dim=0).tolist()
        return (None,) * _OPTIONS + tuple(g.narrow(0, offset, rows) for g, offset, rows
                                          in zip(reduced, offsets, ctx.rows))


class ReducescatterFunction(torch.autograd.Function):
    """reducescatter (is_grouped: grouped_reducescatter); gradient: the
    allgather of the output gradients, scaled as Horovod's (module docstring).
    options: op, prescale_factor, postscale_factor, process_set."""

    @staticmethod
    def forward(ctx, is_grouped, name, options, *tensors):
        ctx.is_grouped, ctx.options = is_grouped, options
        return tuple(_run(is_grouped, _synced(ops.reducescatter_async),
                          _synced(_grouped.grouped_reducescatter_async), tensors, name=name,
                          **options))

    @staticmethod
    def backward(ctx, *grads):
        o = ctx.options
        n = process_sets.set_size(o["process_set"])
        scale = (n if o["op"] == ops.Sum else 1) * o["prescale_factor"] * o["postscale_factor"]
        scaled = [g * scale for g in grads] if scale != 1 else grads
        return (None,) * _OPTIONS + tuple(_run(ctx.is_grouped, ops.allgather,
                                                _grouped.grouped_allgather, scaled,
                                                process_set=o["process_set"]))


class BroadcastFunction(torch.autograd.Function):
    """broadcast; gradient: the Average-allreduce of the output gradient on the
    root, zero elsewhere."""

    @staticmethod
    def forward(ctx, root_rank, name, options, tensor):
        ctx.root_rank, ctx.options = root_rank, options
        return ops.synchronize(ops.broadcast_async(tensor, root_rank, name=name, **options))

    @staticmethod
    def backward(ctx, grad):
        reduced = ops.allreduce(grad, op=ops.Average, **ctx.options)
        return (None,) * _OPTIONS + (reduced if rank() == ctx.root_rank
                                     else torch.zeros_like(reduced),)


class AlltoallFunction(torch.autograd.Function):
    """alltoall, returning (output, received_splits); gradient: the output
    gradient sent back by an alltoall with the received splits."""

    @staticmethod
    def forward(ctx, splits, name, options, tensor):
        out, received = ops.synchronize(ops.alltoall_async(tensor, splits, name=name, **options))
        ctx.received, ctx.options = received, options
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _ = ops.alltoall(grad, splits=ctx.received, **ctx.options)
        return (None,) * _OPTIONS + (back,)


def _compressed(compression, tensors):
    """(spec for tutti's C++ stage or None, the tensors to send, decompress):
    a Horovod-style compressor runs in Python around an uncompressed op."""
    spec, python_side = native_spec(compression)
    if python_side is None:
        return spec, list(tensors), list
    tensors = list(tensors)
    for i, t in enumerate(tensors):  # tutti's error, not the compressor's, for a bad input
        ops._check_tensor(t, "tensors[%d]" % i if len(tensors) > 1 else "tensor")
    pairs = [python_side.compress(t) for t in tensors]
    return (Compression.none.spec, [p[0] for p in pairs],
            lambda outs: [python_side.decompress(o, p[1]) for o, p in zip(outs, pairs)])


def _apply(function, first, name, options, tensors):
    return list(function.apply(first, name, options, *tensors))


def allreduce(tensors, is_grouped, name, compression, **options):
    """The list of outputs of ops.allreduce (one tensor) or ops.grouped_allreduce."""
    spec, inputs, decompress = _compressed(compression, tensors)
    return decompress(_apply(AllreduceFunction, is_grouped, name,
                             dict(options, compression=spec), inputs))


def reducescatter(tensors, is_grouped, name, compression, **options):
    """The list of outputs of ops.reducescatter or grouped.grouped_reducescatter
    (tutti's C++ compressors do not apply: a Compression member is ignored)."""
    _, inputs, decompress = _compressed(compression, tensors)
    return decompress(_apply(ReducescatterFunction, is_grouped, name, options, inputs))


def allgather(tensors, is_grouped, name, process_set):
    """The list of outputs of ops.allgather or grouped.grouped_allgather."""
    return _apply(AllgatherFunction, is_grouped, name, {"process_set": process_set}, tensors)


def broadcast(tensor, root_rank, name, process_set):
    return BroadcastFunction.apply(root_rank, name, {"process_set": process_set}, tensor)


def alltoall(tensor, splits, name, process_set):
    """(output, received_splits), as alltoall_async's result."""
    return AlltoallFunction.apply(splits, name, {"process_set": process_set}, tensor)

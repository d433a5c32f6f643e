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

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from tutti import process_sets
from tutti.basics import rank
from tutti.compression import Compression, native_spec
from tutti.torch import _async_ops, exchange
from tutti.torch import grouped as _grouped
from tutti.torch._core import Average, Sum, check_tensor
from tutti.torch._handles import synchronize

_OPTIONS = 3  # leading non-tensor arguments of the Functions' forward


def _run(is_grouped: bool, one: Callable[..., Any], group: Callable[..., Any],
         tensors: Sequence[torch.Tensor], **kwargs: Any) -> List[torch.Tensor]:
    """[op `one` on tensors[0]], or the list of results of op `group` on the list."""
    return list(group(list(tensors), **kwargs)) if is_grouped else [one(tensors[0], **kwargs)]


def _synced(start: Callable[..., int]) -> Callable[..., Any]:
    """The blocking form of an async op, for forward (the blocking ops would
    apply the Function again)."""
    return lambda *args, **kwargs: synchronize(start(*args, **kwargs))


class AllreduceFunction(torch.autograd.Function):
    """allreduce (is_grouped: grouped_allreduce); gradient: the same op of the
    output gradients. options: op, the scale factors, process_set, compression."""

    @staticmethod
    def forward(ctx, is_grouped, name, options, *tensors):
        ctx.is_grouped, ctx.options = is_grouped, options
        return tuple(_run(is_grouped, _synced(_async_ops.allreduce_async),
                          _synced(_async_ops.grouped_allreduce_async), tensors,
                          name=name, **options))

    @staticmethod
    def backward(ctx, *grads):
        options = dict(ctx.options)  # Horovod's HorovodAllreduce passes no compression
        compression = options.pop("compression", Compression.none)
        return (None,) * _OPTIONS + tuple(allreduce(grads, ctx.is_grouped, None, compression,
                                                    **options))


class AllgatherFunction(torch.autograd.Function):
    """allgather (is_grouped: grouped_allgather); gradient: this rank's rows of
    the Average-allreduce of the output gradients. options: process_set."""

    @staticmethod
    def forward(ctx, is_grouped, name, options, *tensors):
        outs = _run(is_grouped, _synced(_async_ops.allgather_async),
                    _synced(_grouped.grouped_allgather_async), tensors, name=name, **options)
        ctx.is_grouped, ctx.options = is_grouped, options
        ctx.rows = [t.shape[0] for t in tensors]
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        reduced = allreduce(grads, ctx.is_grouped, None, Compression.none, op=Average,
                            prescale_factor=1.0, postscale_factor=1.0, **ctx.options)
        every = allgather([torch.tensor([ctx.rows], dtype=torch.int64)], False, None,
                          **ctx.options)[0]
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
        return tuple(_run(is_grouped, _synced(exchange.reducescatter_async),
                          _synced(_grouped.grouped_reducescatter_async), tensors, name=name,
                          **options))

    @staticmethod
    def backward(ctx, *grads):
        o = ctx.options
        n = process_sets.set_size(o["process_set"])
        scale = (n if o["op"] == Sum else 1) * o["prescale_factor"] * o["postscale_factor"]
        scaled = [g * scale for g in grads] if scale != 1 else grads
        return (None,) * _OPTIONS + tuple(allgather(scaled, ctx.is_grouped, None,
                                                    o["process_set"]))


class BroadcastFunction(torch.autograd.Function):
    """broadcast; gradient: the Average-allreduce of the output gradient on the
    root, zero elsewhere."""

    @staticmethod
    def forward(ctx, root_rank, name, options, tensor):
        ctx.root_rank, ctx.options = root_rank, options
        return synchronize(_async_ops.broadcast_async(tensor, root_rank, name=name, **options))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce([grad], False, None, Compression.none, op=Average,
                            prescale_factor=1.0, postscale_factor=1.0, **ctx.options)[0]
        return (None,) * _OPTIONS + (reduced if rank() == ctx.root_rank
                                     else torch.zeros_like(reduced),)


class AlltoallFunction(torch.autograd.Function):
    """alltoall, returning (output, received_splits); gradient: the output
    gradient sent back by an alltoall with the received splits."""

    @staticmethod
    def forward(ctx, splits, name, options, tensor):
        out, received = synchronize(exchange.alltoall_async(tensor, splits, name=name,
                                                            **options))
        ctx.received, ctx.options = received, options
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _ = alltoall(grad, ctx.received, None, ctx.options["process_set"])
        return (None,) * _OPTIONS + (back,)


def _compressed(compression: object, tensors: Sequence[torch.Tensor]
                ) -> Tuple[Optional[str], List[torch.Tensor], Callable[[List[Any]], List[Any]]]:
    """(spec for tutti's C++ stage or None, the tensors to send, decompress):
    a Horovod-style compressor runs in Python around an uncompressed op."""
    spec, python_side = native_spec(compression)
    if python_side is None:
        return spec, list(tensors), list
    tensors = list(tensors)
    for i, t in enumerate(tensors):  # tutti's error, not the compressor's, for a bad input
        check_tensor(t, "tensors[%d]" % i if len(tensors) > 1 else "tensor")
    pairs = [python_side.compress(t) for t in tensors]
    return (Compression.none.spec, [p[0] for p in pairs],
            lambda outs: [python_side.decompress(o, p[1]) for o, p in zip(outs, pairs)])


def _apply(function: Any, first: object, name: Optional[str], options: dict,
           tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    return list(function.apply(first, name, options, *tensors))


def allreduce(tensors: Sequence[torch.Tensor], is_grouped: bool, name: Optional[str],
              compression: object, **options: Any) -> List[torch.Tensor]:
    """The list of outputs of ops.allreduce (one tensor) or ops.grouped_allreduce.
    options: op (a code), prescale_factor, postscale_factor, process_set."""
    spec, inputs, decompress = _compressed(compression, tensors)
    return decompress(_apply(AllreduceFunction, is_grouped, name,
                             dict(options, compression=spec), inputs))


def reducescatter(tensors: Sequence[torch.Tensor], is_grouped: bool, name: Optional[str],
                  compression: object, **options: Any) -> List[torch.Tensor]:
    """The list of outputs of ops.reducescatter or ops.grouped_reducescatter
    (tutti's C++ compressors do not apply: a Compression member is ignored).
    options: op (a code), prescale_factor, postscale_factor, process_set."""
    _, inputs, decompress = _compressed(compression, tensors)
    return decompress(_apply(ReducescatterFunction, is_grouped, name, options, inputs))


def allgather(tensors: Sequence[torch.Tensor], is_grouped: bool, name: Optional[str],
              process_set: Optional[object]) -> List[torch.Tensor]:
    """The list of outputs of ops.allgather or ops.grouped_allgather."""
    return _apply(AllgatherFunction, is_grouped, name, {"process_set": process_set}, tensors)


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str],
              process_set: Optional[object]) -> torch.Tensor:
    """ops.broadcast's output."""
    return BroadcastFunction.apply(root_rank, name, {"process_set": process_set}, tensor)


def alltoall(tensor: torch.Tensor, splits: object, name: Optional[str],
             process_set: Optional[object]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(output, received_splits), as alltoall_async's result."""
    return AlltoallFunction.apply(splits, name, {"process_set": process_set}, tensor)

"""Higher-level helpers over the collectives (Horovod's torch.functions) and the
autograd Functions that make allreduce/allgather/broadcast differentiable.

Thread-safety: like the ops, callable from any thread, but each helper issues
several collectives in order; concurrent helpers on one rank must not
interleave differently on different ranks (give them distinct names).
"""

import io
import pickle

import torch

from tutti.basics import rank, size
from tutti.errors import InvalidArgumentError
from tutti.torch import ops


class AllreduceFunction(torch.autograd.Function):
    """allreduce with a gradient: d(out)/d(in) is the same allreduce of grad."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, compression=None):
        ctx.op, ctx.pre, ctx.post = op, prescale_factor, postscale_factor
        ctx.compression = compression
        return ops.synchronize(ops.allreduce_async(tensor, None, name, op, prescale_factor,
                                                   postscale_factor, None, compression))

    @staticmethod
    def backward(ctx, grad_output):
        grad = ops.synchronize(ops.allreduce_async(grad_output.contiguous(), None, None, ctx.op,
                                                   ctx.pre, ctx.post, None, ctx.compression))
        return grad, None, None, None, None, None


class AllgatherFunction(torch.autograd.Function):
    """allgather with a gradient: this rank's rows of the summed output gradient."""

    @staticmethod
    def forward(ctx, tensor, name):
        ctx.dim0 = tensor.shape[0]
        return ops.synchronize(ops.allgather_async(tensor, name))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = ops.synchronize(ops.allreduce_async(grad_output.contiguous(), op=ops.Sum))
        dims = ops.synchronize(ops.allgather_async(torch.tensor([ctx.dim0], dtype=torch.int64)))
        offset = int(dims[: rank()].sum())
        return grad_reduced.narrow(0, offset, ctx.dim0), None


class BroadcastFunction(torch.autograd.Function):
    """broadcast with a gradient: the summed output gradient on the root, 0 elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank = root_rank
        return ops.synchronize(ops.broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad_output):
        grad = ops.synchronize(ops.allreduce_async(grad_output.contiguous(), op=ops.Sum))
        if rank() != ctx.root_rank:
            grad.zero_()
        return grad, None, None


def broadcast_parameters(params, root_rank=0, process_set=None):
    """Overwrites `params` on every rank with root_rank's values, in place.

    params: a dict name -> tensor (model.state_dict(); broadcast in sorted-name
    order, named "bcast.<name>"), or a list of tensors or (name, tensor) pairs
    (model.named_parameters()). Every rank passes the same structure. Any dtype
    and shape. Raises TuttiError subclasses.
    """
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = []
    for name, p in items:
        tensor = p.data if isinstance(p, torch.nn.Parameter) else p
        handles.append(ops.broadcast_async_(tensor, root_rank,
                                            None if name is None else "bcast." + str(name),
                                            process_set))
    for h in handles:
        ops.synchronize(h)


def _describe_state(optimizer):
    """Root's state as a picklable description: per-group options, and per
    parameter index (in param_group order) each state entry as ("tensor",
    shape, dtype) or ("value", value)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for index, p in enumerate(params):
        entries = {}
        for key, value in optimizer.state.get(p, {}).items():
            if torch.is_tensor(value):
                entries[key] = ("tensor", tuple(value.shape), value.dtype)
            else:
                entries[key] = ("value", value)
        if entries:
            state[index] = entries
    groups = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    return {"groups": groups, "state": state, "num_params": len(params)}


def broadcast_optimizer_state(optimizer, root_rank=0, process_set=None):
    """Makes every rank's optimizer state equal to root_rank's: every
    param_group option (lr, momentum, ...) and every per-parameter entry
    (momentum buffers, Adam's moments and step counts). Tensors are broadcast
    in place (allocated where a rank lacks them); other values through
    broadcast_object. Parameters and root's state are not changed; a fresh
    optimizer stays fresh (no step is taken). Every rank must have the same
    parameter layout. Works for a DistributedOptimizer too."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    desc = broadcast_object(_describe_state(optimizer), root_rank, name="opt.state.desc",
                            process_set=process_set)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if len(params) != desc["num_params"] or len(optimizer.param_groups) != len(desc["groups"]):
        raise InvalidArgumentError(
            "broadcast_optimizer_state: rank %d has %d parameters in %d groups, root rank %d has "
            "%d in %d" % (rank(), len(params), len(optimizer.param_groups), root_rank,
                          desc["num_params"], len(desc["groups"])), 1)
    for group, options in zip(optimizer.param_groups, desc["groups"]):
        group.update(options)
    handles = []
    for index in sorted(desc["state"]):
        p = params[index]
        local = optimizer.state[p]
        for key in sorted(desc["state"][index], key=str):
            entry = desc["state"][index][key]
            if entry[0] == "value":
                local[key] = entry[1]
                continue
            _, shape, dtype = entry
            tensor = local.get(key)
            if not torch.is_tensor(tensor) or tuple(tensor.shape) != shape or tensor.dtype != dtype:
                tensor = torch.zeros(shape, dtype=dtype)
                local[key] = tensor
            handles.append(ops.broadcast_async_(tensor, root_rank, "opt.%d.%s" % (index, key),
                                                process_set))
    for h in handles:
        ops.synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns root_rank's `obj` on every rank (pickled; any picklable object).
    Root returns its own object unchanged. name defaults to the type's name."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        buf = io.BytesIO()
        pickle.dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
        ops.broadcast_(length, root_rank, name + ".len", process_set)
    else:
        length = torch.zeros(1, dtype=torch.int64)
        ops.broadcast_(length, root_rank, name + ".len", process_set)
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    ops.broadcast_(payload, root_rank, name + ".data", process_set)
    if rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    """Returns the list of every rank's `obj` (pickled), in rank order."""
    name = name or type(obj).__name__
    payload = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)),
                               dtype=torch.uint8)
    lengths = ops.allgather(torch.tensor([payload.numel()], dtype=torch.int64), name + ".len",
                            process_set)
    data = ops.allgather(payload, name + ".data", process_set)
    if data.numel() != int(lengths.sum()):
        raise InvalidArgumentError("allgather_object: %d bytes gathered, %d announced"
                                   % (data.numel(), int(lengths.sum())), 1)
    out, offset = [], 0
    raw = data.numpy().tobytes()
    for n in lengths.tolist():
        out.append(pickle.loads(raw[offset:offset + n]))
        offset += n
    if len(out) != size():
        raise InvalidArgumentError("allgather_object: %d objects for %d ranks" % (len(out), size()), 1)
    return out

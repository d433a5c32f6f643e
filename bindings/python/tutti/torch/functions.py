"""Higher-level helpers over the collectives (Horovod's torch.functions). The
autograd Functions of the collectives are in tutti.torch.autograd.

process_set= (None: every rank): only the set's members call the helper, and
root_rank is a global rank (a member), as in Horovod.

Thread-safety: like the ops, callable from any thread, but each helper issues
several collectives in order; concurrent helpers on one rank must not
interleave differently on different ranks (give them distinct names).
"""

import pickle
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from tutti import elastic, process_sets
from tutti.basics import rank, size  # noqa: F401 (Horovod's functions module has size)
from tutti.errors import InvalidArgumentError
from tutti.process_sets import ProcessSet, global_process_set  # noqa: F401
from tutti.torch import ops
from tutti.torch.ops import allgather, broadcast_, broadcast_async_, synchronize  # noqa: F401


def broadcast_parameters(params: Any, root_rank: int = 0,
                         process_set: Optional[object] = None) -> None:
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


def _describe_state(optimizer: Any) -> Dict[str, Any]:
    """Root's state as a picklable description: per-group options, and per
    parameter index (in param_group order) each state entry as ("tensor",
    shape, dtype, on the parameter's device) or ("value", value)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for index, p in enumerate(params):
        entries: Dict[Any, Tuple[Any, ...]] = {}
        for key, value in optimizer.state.get(p, {}).items():
            if torch.is_tensor(value):
                entries[key] = ("tensor", tuple(value.shape), value.dtype,
                                value.device == p.device)
            else:
                entries[key] = ("value", value)
        if entries:
            state[index] = entries
    groups = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    return {"groups": groups, "state": state, "num_params": len(params)}


def _shape_like_root(optimizer: Any, desc: Dict[str, Any], params: List[torch.Tensor]
                     ) -> List[Tuple[str, torch.Tensor]]:
    """Makes the optimizer's options and state entries those of root's
    description `desc`: options set, values copied, entries and parameter
    states root lacks removed, tensors allocated where missing or different.
    Returns the [(name, tensor)] to broadcast from root, in order."""
    for group, options in zip(optimizer.param_groups, desc["groups"]):
        for key in [k for k in group if k != "params" and k not in options]:
            del group[key]
        group.update(options)
    tensors = []
    for index, p in enumerate(params):
        entries = desc["state"].get(index)
        if entries is None:
            optimizer.state.pop(p, None)
            continue
        local = optimizer.state[p]
        for key in [k for k in local if k not in entries]:
            del local[key]
        for key in sorted(entries, key=str):
            entry = entries[key]
            if entry[0] == "value":
                local[key] = entry[1]
                continue
            _, shape, dtype, on_param_device = entry
            device = p.device if on_param_device else torch.device("cpu")
            tensor = local.get(key)
            if (not torch.is_tensor(tensor) or tuple(tensor.shape) != shape
                    or tensor.dtype != dtype or tensor.device != device):
                tensor = torch.zeros(shape, dtype=dtype, device=device)
                local[key] = tensor
            tensors.append(("opt.%d.%s" % (index, key), tensor))
    return tensors


def _sparse_parameter_ids(model: Any) -> set:
    """ids of the parameters of model's sparse Embeddings (Horovod's model= argument)."""
    if model is None:
        return set()
    return {id(p) for m in model.modules()
            if isinstance(m, torch.nn.Embedding) and m.sparse for p in m.parameters()}


def _initialize_state(optimizer: Any, model: Any) -> None:
    """Horovod's state initialization (horovod/torch/functions.py 0.28.1): an
    optimizer without state gives every parameter that requires grad a zero
    gradient of its shape (sparse for SparseAdam, and for SGD on a sparse
    Embedding of model) and steps once; a DistributedOptimizer steps the
    wrapped optimizer's step(), without any allreduce. A zero step leaves the
    parameters unchanged unless the optimizer's weight decay moves them, as
    in Horovod."""
    if optimizer.state_dict()["state"]:
        return
    sparse = _sparse_parameter_ids(model)
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam) or (
                        isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    p.grad = p.grad.to_sparse()
    if type(optimizer).__module__ in _DISTRIBUTED_MODULES:
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


# The modules of DistributedOptimizer's classes (Horovod tests __module__ alike).
_DISTRIBUTED_MODULES = ("tutti.torch.optimizer", "tutti.torch.adasum_optimizer")


def broadcast_optimizer_state(optimizer: Any, root_rank: int = 0, model: Any = None,
                              process_set: Optional[object] = None) -> None:
    """Makes every rank's optimizer state equal to root_rank's: every
    param_group option (lr, momentum, ...) and every per-parameter entry
    (momentum buffers, Adam's moments and step counts).

    As Horovod's, an optimizer without state is first stepped once with zero
    gradients (_initialize_state): afterwards every parameter that requires
    grad has a zero p.grad of its shape, on every rank, and the optimizer's
    state exists (an Adam step count of 1). model: optional, its sparse
    Embeddings get sparse zero gradients under SGD (Horovod's model=).
    Tensors are then broadcast in place (allocated where a rank lacks them);
    other values through broadcast_object; state root does not have (a
    parameter's whole state, or one entry) is removed, so that a rank that
    stepped before takes its next step as root does. Every rank must have
    the same parameter layout. Works for a DistributedOptimizer too.
    Raises ValueError for torch.optim.LBFGS, InvalidArgumentError when the
    layouts differ."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    _initialize_state(optimizer, model)
    desc = broadcast_object(_describe_state(optimizer), root_rank, name="opt.state.desc",
                            process_set=process_set)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if len(params) != desc["num_params"] or len(optimizer.param_groups) != len(desc["groups"]):
        raise InvalidArgumentError(
            "broadcast_optimizer_state: rank %d has %d parameters in %d groups, root rank %d has "
            "%d in %d" % (rank(), len(params), len(optimizer.param_groups), root_rank,
                          desc["num_params"], len(desc["groups"])), 1)
    handles = [ops.broadcast_async_(tensor, root_rank, name, process_set)
               for name, tensor in _shape_like_root(optimizer, desc, params)]
    for h in handles:
        ops.synchronize(h)


# this rank's unnamed object collectives
_unnamed: Dict[str, Any] = {"generation": None, "calls": {}}
_unnamed_lock = threading.Lock()


def _object_name(kind: str, name: Optional[object], process_set: Optional[object] = None
                 ) -> str:
    """`name`, or for name=None "<kind>.noname.<n>": n counts this rank's
    unnamed broadcast_object/allgather_object calls over process_set (since
    import, or in an elastic job since it joined the current generation).
    Every member makes the same calls in the same order, so n agrees within
    the set whatever objects the ranks pass (names are matched per set).
    (Horovod names them after type(obj), which hangs when the types differ:
    the root passing its dict as "dict.sz", the others None as "NoneType.sz".)"""
    if name is not None:
        return str(name)
    ps_id = process_sets.process_set_id(process_set)
    generation = elastic.generation()
    with _unnamed_lock:
        if _unnamed["generation"] != generation:
            _unnamed.update(generation=generation, calls={})
        n = _unnamed["calls"].get(ps_id, 0)
        _unnamed["calls"][ps_id] = n + 1
    return "%s.noname.%d" % (kind, n)


def _pickled(obj: Any) -> Tuple[torch.Tensor, int, Optional[BaseException]]:
    """(uint8 payload, signed length, error): obj's pickle and its length, or
    for an object that cannot be pickled the error's text, minus its length,
    and the error, so that the other ranks learn of it through the collective."""
    try:
        data, error = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), None
    except Exception as e:  # whatever pickling raises (a __reduce__ may raise anything)
        data, error = ("%s: %s" % (type(e).__name__, e)).encode("utf-8", "replace"), e
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return payload, -len(data) if error else len(data), error


def _payloads(kind: str, ranks: Sequence[int], lengths: Sequence[int], raw: bytes,
              error: Optional[BaseException]) -> List[bytes]:
    """The pickles of `ranks`, concatenated in `raw` with these signed lengths.
    Raises InvalidArgumentError, the same on every rank, naming each rank that
    could not pickle its object and why (chained to this rank's error)."""
    chunks, offset = [], 0
    for n in lengths:
        chunks.append(raw[offset:offset + abs(n)])
        offset += abs(n)
    failed = ["rank %d (%s)" % (r, c.decode("utf-8", "replace"))
              for r, n, c in zip(ranks, lengths, chunks) if n < 0]
    if failed:
        raise InvalidArgumentError("%s: could not pickle the object of %s"
                                   % (kind, ", ".join(failed)), 1) from error
    return chunks


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: Optional[object] = None) -> Any:
    """Returns root_rank's `obj` on every rank (pickled; the others' obj is
    ignored, e.g. None). Root returns its own object unchanged. name: see
    _object_name (None: generated, the same on every rank whatever the
    objects). An object that root cannot pickle raises InvalidArgumentError on
    every rank; later collectives work."""
    name = _object_name("broadcast_object", name, process_set)
    is_root = rank() == root_rank
    payload: Any
    payload, n, error = _pickled(obj) if is_root else (None, 0, None)
    length = torch.tensor([n], dtype=torch.int64)
    ops.broadcast_(length, root_rank, name + ".len", process_set)
    n = int(length.item())
    if not is_root:
        payload = torch.empty(abs(n), dtype=torch.uint8)
    ops.broadcast_(payload, root_rank, name + ".data", process_set)
    chunk = _payloads("broadcast_object", [root_rank], [n], payload.numpy().tobytes(), error)[0]
    return obj if is_root else pickle.loads(chunk)


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set: Optional[object] = None) -> List[Any]:
    """Returns the list of every rank's `obj` (pickled), in rank order. name:
    as broadcast_object's. An object that a rank cannot pickle raises
    InvalidArgumentError on every rank, naming the ranks; later collectives work."""
    name = _object_name("allgather_object", name, process_set)
    payload, n, error = _pickled(obj)
    lengths = ops.allgather(torch.tensor([n], dtype=torch.int64), name + ".len", process_set)
    raw = ops.allgather(payload, name + ".data", process_set).numpy().tobytes()
    lengths = lengths.tolist()
    ranks = process_sets.set_ranks(process_set)
    return [pickle.loads(c) for c in _payloads("allgather_object", ranks, lengths, raw, error)]

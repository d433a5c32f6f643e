"""Pytree and Python-object helpers over tutti.jax's collectives.

Each is a collective: every rank of the set calls it at the same point of
its program, with pytrees of the same structure, shapes and dtypes (objects
may differ). Thread-safety: as tutti.jax.ops (one thread per process).
"""

import pickle
from typing import Any, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from tutti import _placement
from tutti import process_sets as _sets
from tutti.errors import InvalidArgumentError
from tutti.jax import ops
from tutti.jax._primitive import translated


def allreduce_tree(tree: Any, op: int = ops.Average, prescale_factor: float = 1.0,
                   postscale_factor: float = 1.0,
                   process_set: Optional[_sets.ProcessSet] = _sets.global_process_set,
                   compression: Any = None) -> Any:
    """Allreduces every leaf of a pytree (arrays or numbers) as one grouped
    allreduce (fused; see ops.grouped_allreduce); returns a pytree of the
    same structure whose leaves are jax arrays of the leaves' shapes and
    dtypes. Usable inside jax.jit and differentiable as allreduce."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    reduced = ops.grouped_allreduce(leaves, op, prescale_factor, postscale_factor, process_set,
                                    compression)
    return jax.tree_util.tree_unflatten(treedef, reduced)


def broadcast_parameters(params: Any, root_rank: int = 0,
                         process_set: Optional[_sets.ProcessSet] = _sets.global_process_set
                         ) -> Any:
    """root_rank's pytree (e.g. model parameters or an optax state) on every
    rank: each leaf broadcast (ops.broadcast), in the tree's leaf order.
    Returns a new pytree (jax arrays are immutable); call it after
    initialising the parameters so that every rank starts from the same
    values."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    return jax.tree_util.tree_unflatten(
        treedef, [ops.broadcast(leaf, root_rank, process_set) for leaf in leaves])


def _pickled(obj):
    try:
        return np.frombuffer(pickle.dumps(obj), dtype=np.uint8), None
    except Exception as e:  # noqa: BLE001 (any pickling error is reported on every rank)
        return np.zeros(0, dtype=np.uint8), e


def _failed(what, ranks, error):
    raise InvalidArgumentError("%s: could not pickle the object of rank(s) %s"
                               % (what, ", ".join(str(r) for r in ranks)), 1) from error


def broadcast_object(obj: Any, root_rank: int = 0,
                     process_set: Optional[_sets.ProcessSet] = _sets.global_process_set) -> Any:
    """root_rank's picklable object on every rank of the set (the others'
    obj is ignored, e.g. None); the root gets its own object back. An object
    the root cannot pickle raises InvalidArgumentError on every rank. Eager
    only (it returns a Python object)."""
    is_root = _placement.rank() == int(root_rank)
    payload, error = _pickled(obj) if is_root else (np.zeros(0, dtype=np.uint8), None)
    length = (-1 if error else len(payload)) if is_root else 0
    with translated():
        n = int(ops.broadcast(np.asarray([length], np.int32), root_rank, process_set)[0])
        if n < 0:
            _failed("broadcast_object", [root_rank], error)
        if not is_root:
            payload = np.zeros(n, dtype=np.uint8)
        data = np.asarray(ops.broadcast(payload, root_rank, process_set))
    return obj if is_root else pickle.loads(data.tobytes())


def allgather_object(obj: Any,
                     process_set: Optional[_sets.ProcessSet] = _sets.global_process_set
                     ) -> List[Any]:
    """Every rank's picklable object, in rank order of the set. An object a
    rank cannot pickle raises InvalidArgumentError on every rank, naming the
    ranks. Eager only."""
    payload, error = _pickled(obj)
    with translated():
        lengths = ops.allgather(np.asarray([-1 if error else len(payload)], np.int32),
                                process_set, sizes=[1] * _sets.set_size(process_set))
        lengths = [int(n) for n in np.asarray(lengths)]
        ranks = _sets.set_ranks(process_set)
        if min(lengths) < 0:
            _failed("allgather_object", [r for r, n in zip(ranks, lengths) if n < 0], error)
        data = np.asarray(ops.allgather(jnp.asarray(payload), process_set, sizes=lengths))
    offsets = np.cumsum([0] + lengths)
    return [pickle.loads(data[offsets[i]:offsets[i + 1]].tobytes()) for i in range(len(ranks))]

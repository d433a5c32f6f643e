"""tutti's collectives on jax arrays, eagerly and inside jax.jit.

Every op runs as an XLA custom call (libtutti_jax.so) on the ordered lane
(docs/jax.md): rank r's k-th tutti op meets every other rank's k-th, so every
rank must call the same ops in the same order with matching arguments (the
same dtype and shape, root, op...); otherwise the op fails with MismatchError
on every rank. Calls return at once (XLA runs asynchronously); errors from
the runtime reach Python when the result is used, as jax's JaxRuntimeError
with a message "[tutti status N: name] ..." (tutti.jax.translated() turns it
into tutti's error). Arguments checked on this rank raise at the call:
InvalidArgumentError (a ValueError) for an unsupported dtype, a bad root,
splits or op, a process set this rank is not in.

Dtypes: bool, int8/16/32/64, uint8 (and uint16/32/64 with a libtutti that
has them), float16, bfloat16, float32, float64; complex64/complex128 for
everything but allreduce/reducescatter with Min, Max or Product (they travel
as pairs of reals). 64-bit types need jax_enable_x64 as usual in jax.

Shapes: allreduce and broadcast keep the input's shape; allgather,
alltoall and reducescatter work on the first dimension (ndim >= 1). Output
shapes must be static in jax: allgather and alltoall learn the other ranks'
first dimensions and splits with one small collective when they are traced
(eagerly: at every call), unless given (allgather's sizes=). Under jit a
retrace on one rank only (its shapes changed) pairs that exchange with
another rank's op: both fail with MismatchError; a traced program whose
peers' sizes changed fails with MismatchError naming the sizes.

Gradients (jax.grad, reverse mode): allreduce and grouped_allreduce with Sum
or Average (the cotangents allreduced alike), allgather (reduce-scatter of
the cotangents), reducescatter (allgather), broadcast (the sum of every
rank's cotangent on the root, zeros elsewhere), alltoall (alltoall back).
Min, Max and Product allreduces are not differentiable (NotImplementedError
when differentiated). vmap: allreduce, grouped_allreduce and broadcast.

Thread-safety: call the ops from one thread per process (the ordered lane's
order is the program's order).
"""

from functools import partial
from typing import Any, List, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core

from tutti import _library, _placement
from tutti import process_sets as _sets
from tutti.compression import native_spec
from tutti.errors import InvalidArgumentError
from tutti.jax._primitive import collective

Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product"}

_ALWAYS = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32",
           "float64", "complex64", "complex128")
_NEWER = {"uint16": 10, "uint32": 11, "uint64": 12}  # tutti_dtype values (tutti.h)


def _check(x, what, op=None):
    """Raises InvalidArgumentError for a dtype or op tutti cannot run."""
    name = jnp.dtype(x.dtype).name
    if name in _NEWER:
        if not _library.load().tutti_dtype_size(_NEWER[name]):
            raise InvalidArgumentError(
                "%s: %s needs a libtutti with tutti_dtype %d (this one predates it)"
                % (what, name, _NEWER[name]), 1)
    elif name not in _ALWAYS:
        raise InvalidArgumentError("%s: dtype %s is not supported (tutti has %s)"
                                   % (what, name, ", ".join(_ALWAYS + tuple(_NEWER))), 1)
    if op is not None:
        if op not in _OP_NAMES:
            raise InvalidArgumentError("%s: op must be tutti.jax.Sum, Average, Min, Max or "
                                       "Product, got %r" % (what, op), 1)
        if name.startswith("complex") and op not in (Sum, Average):
            raise InvalidArgumentError("%s: %s of complex numbers is not defined"
                                       % (what, _OP_NAMES[op]), 1)


def _first_dim(x, what):
    if x.ndim < 1:
        raise InvalidArgumentError("%s: the input needs at least one dimension, got a scalar "
                                   "(reshape it to (1,))" % what, 1)
    return int(x.shape[0])


def _where(process_set):
    """(set id, set size, this rank's rank in the set); raises when not a member."""
    return (_sets.process_set_id(process_set), _sets.set_size(process_set),
            _sets.set_rank(process_set))


def _aval(shape, dtype):
    return core.ShapedArray(tuple(shape), dtype)


def _is_zero_cotangent(g):
    return g.dtype == jax.dtypes.float0


# ---- allreduce ---------------------------------------------------------------------------


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4, 5))
def _allreduce(xs, op, pre, post, ps, spec):
    return tuple(collective("tutti_allreduce", xs, [_aval(x.shape, x.dtype) for x in xs],
                            op=np.int32(op), prescale=np.float64(pre),
                            postscale=np.float64(post), process_set=np.int32(ps),
                            compression=spec))


def _allreduce_fwd(xs, op, pre, post, ps, spec):
    return _allreduce(xs, op, pre, post, ps, spec), None


def _allreduce_bwd(op, pre, post, ps, spec, _, gs):
    if op not in (Sum, Average):
        raise NotImplementedError("the gradient of a %s allreduce is not defined in tutti.jax "
                                  "(Sum and Average are)" % _OP_NAMES[op])
    real = tuple(g for g in gs if not _is_zero_cotangent(g))
    reduced = iter(_allreduce(real, op, pre, post, ps, spec) if real else ())
    return (tuple(g if _is_zero_cotangent(g) else next(reduced) for g in gs),)


_allreduce.defvjp(_allreduce_fwd, _allreduce_bwd)


def grouped_allreduce(tensors: Sequence[Any], op: int = Average, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: Optional[_sets.ProcessSet] = _sets.global_process_set,
                      compression: Any = None) -> List[jax.Array]:
    """Allreduces a list of arrays as one op (fused): result i =
    postscale_factor * op(prescale_factor * tensors[i] over the set's ranks),
    each with its input's shape and dtype (integers scaled in float64 and
    truncated, as tutti.h says). op: Sum, Average (default, Horovod's),
    Min, Max, Product. compression: a tutti.Compression member or spec
    string (tutti's C++ compressors; such allreduces are negotiated, see
    docs/jax.md), None = the job's TUTTI_COMPRESSION."""
    xs = tuple(jnp.asarray(t) for t in tensors)
    for x in xs:
        _check(x, "allreduce", op)
    ps, _, _ = _where(process_set)
    spec, python_compressor = native_spec(compression)
    if python_compressor is not None:
        raise InvalidArgumentError("tutti.jax takes tutti.Compression members or spec strings "
                                   "(run by tutti's C++ stage), not Python compressors", 1)
    if not xs:
        return []
    return list(_allreduce(xs, int(op), float(prescale_factor), float(postscale_factor), ps,
                           spec or ""))


def allreduce(tensor: Any, op: int = Average, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0,
              process_set: Optional[_sets.ProcessSet] = _sets.global_process_set,
              compression: Any = None) -> jax.Array:
    """Allreduces one array; see grouped_allreduce. Same shape and dtype."""
    return grouped_allreduce([tensor], op, prescale_factor, postscale_factor, process_set,
                             compression)[0]


# ---- allgather and reducescatter ------------------------------------------------------------


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _allgather(x, ps, sizes, rank):
    del rank
    shape = (sum(sizes),) + tuple(x.shape[1:])
    return collective("tutti_allgather", [x], [_aval(shape, x.dtype)],
                      process_set=np.int32(ps))[0]


def _allgather_fwd(x, ps, sizes, rank):
    return _allgather(x, ps, sizes, rank), None


def _allgather_bwd(ps, sizes, rank, _, g):
    if len(set(sizes)) == 1:  # every rank's rows are its reducescatter block
        return (_reducescatter(g, Sum, 1.0, 1.0, ps, len(sizes), rank),)
    offset = sum(sizes[:rank])
    total = _allreduce((g,), Sum, 1.0, 1.0, ps, "")[0]
    return (total[offset:offset + sizes[rank]],)


_allgather.defvjp(_allgather_fwd, _allgather_bwd)


def _exchange(values, ps, size, rank):
    """Every rank's int vector `values` (same length everywhere), as a
    (size, len) numpy array: one small allgather, run now even while jax
    traces (shapes must be known when tracing)."""
    row = np.asarray(values, dtype=np.int32).reshape(1, -1)
    if size == 1:
        return row.astype(np.int64)
    with jax.ensure_compile_time_eval():
        gathered = _allgather(jnp.asarray(row), ps, (1,) * size, rank)
    return np.asarray(gathered).astype(np.int64)


def allgather(tensor: Any, process_set: Optional[_sets.ProcessSet] = _sets.global_process_set,
              sizes: Optional[Sequence[int]] = None) -> jax.Array:
    """Concatenates every rank's array along the first dimension, in rank
    order (of the set). First dimensions may differ across ranks, the other
    dimensions and the dtype must not. sizes: every rank's first dimension,
    when known (saves one small exchange per call or trace); this rank's
    entry must be its own."""
    x = jnp.asarray(tensor)
    _check(x, "allgather")
    d0 = _first_dim(x, "allgather")
    ps, size, rank = _where(process_set)
    if sizes is None:
        sizes = _exchange([d0], ps, size, rank)[:, 0]
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) != size or sizes[rank] != d0 or min(sizes) < 0:
        raise InvalidArgumentError("allgather: sizes=%s must hold the first dimension of each "
                                   "of the %d ranks, this rank's (%d) at index %d"
                                   % (list(sizes), size, d0, rank), 1)
    return _allgather(x, ps, sizes, rank)


def _rows(total, size, rank):
    return total // size + (1 if rank < total % size else 0)


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4, 5, 6))
def _reducescatter(x, op, pre, post, ps, size, rank):
    shape = (_rows(x.shape[0], size, rank),) + tuple(x.shape[1:])
    return collective("tutti_reducescatter", [x], [_aval(shape, x.dtype)], op=np.int32(op),
                      prescale=np.float64(pre), postscale=np.float64(post),
                      process_set=np.int32(ps))[0]


def _reducescatter_fwd(x, op, pre, post, ps, size, rank):
    return _reducescatter(x, op, pre, post, ps, size, rank), x.shape[0]


def _reducescatter_bwd(op, pre, post, ps, size, rank, total, g):
    if op not in (Sum, Average):
        raise NotImplementedError("the gradient of a %s reducescatter is not defined in "
                                  "tutti.jax (Sum and Average are)" % _OP_NAMES[op])
    sizes = tuple(_rows(total, size, r) for r in range(size))
    scale = pre * post / (size if op == Average else 1)
    return ((_allgather(g, ps, sizes, rank) * scale).astype(g.dtype),)


_reducescatter.defvjp(_reducescatter_fwd, _reducescatter_bwd)


def reducescatter(tensor: Any, op: int = Average, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0,
                  process_set: Optional[_sets.ProcessSet] = _sets.global_process_set
                  ) -> jax.Array:
    """Reduces the array (same shape on every rank) as allreduce does and
    returns this rank's rows of the result: rank r of the set gets rows
    [offset_r, offset_r + rows_r), rows_r = d0 // size, plus one for the
    first d0 % size ranks."""
    x = jnp.asarray(tensor)
    _check(x, "reducescatter", op)
    _first_dim(x, "reducescatter")
    ps, size, rank = _where(process_set)
    return _reducescatter(x, int(op), float(prescale_factor), float(postscale_factor), ps, size,
                          rank)


# ---- broadcast and alltoall -------------------------------------------------------------------


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _broadcast(x, root, ps, is_root):
    del is_root
    return collective("tutti_broadcast", [x], [_aval(x.shape, x.dtype)], root=np.int32(root),
                      process_set=np.int32(ps))[0]


def _broadcast_fwd(x, root, ps, is_root):
    return _broadcast(x, root, ps, is_root), None


def _broadcast_bwd(root, ps, is_root, _, g):
    total = _allreduce((g,), Sum, 1.0, 1.0, ps, "")[0]
    return (total if is_root else jnp.zeros_like(g),)


_broadcast.defvjp(_broadcast_fwd, _broadcast_bwd)


def broadcast(tensor: Any, root_rank: int = 0,
              process_set: Optional[_sets.ProcessSet] = _sets.global_process_set) -> jax.Array:
    """root_rank's array on every rank of the set (same shape and dtype on
    every rank). root_rank is a global rank, a member of the set."""
    x = jnp.asarray(tensor)
    _check(x, "broadcast")
    ps, _, _ = _where(process_set)
    members = _sets.set_ranks(process_set)
    if int(root_rank) not in members:
        raise InvalidArgumentError("broadcast: root_rank %r is not a rank of the process set %s"
                                   % (root_rank, members), 1)
    return _broadcast(x, int(root_rank), ps, _placement.rank() == int(root_rank))


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _alltoall(x, ps, splits, received):
    shape = (sum(received),) + tuple(x.shape[1:])
    return collective("tutti_alltoall", [x], [_aval(shape, x.dtype)], splits=splits,
                      received=received, process_set=np.int32(ps))[0]


def _alltoall_fwd(x, ps, splits, received):
    return _alltoall(x, ps, splits, received), x.shape[0]


def _alltoall_bwd(ps, splits, received, total, g):
    back = _alltoall(g, ps, received, splits)
    return (jnp.pad(back, [(0, total - back.shape[0])] + [(0, 0)] * (g.ndim - 1)),)


_alltoall.defvjp(_alltoall_fwd, _alltoall_bwd)


def alltoall(tensor: Any, splits: Optional[Sequence[int]] = None,
             process_set: Optional[_sets.ProcessSet] = _sets.global_process_set
             ) -> Any:
    """Sends splits[p] consecutive rows of the array to rank p of the set, in
    order, and returns the rows received from each rank concatenated in rank
    order. splits: None divides the first dimension evenly (it must be
    divisible by the set's size; returns the output only), else one int >= 0
    per rank summing to at most the first dimension (static: a list or numpy
    array), and the result is (output, received_splits as an int32 array),
    Horovod's convention."""
    x = jnp.asarray(tensor)
    _check(x, "alltoall")
    d0 = _first_dim(x, "alltoall")
    ps, size, rank = _where(process_set)
    if splits is None:
        if d0 % size:
            raise InvalidArgumentError("alltoall: the first dimension %d is not divisible by "
                                       "the %d ranks; pass splits=" % (d0, size), 1)
        send = (d0 // size,) * size
    else:
        send = tuple(int(s) for s in np.asarray(splits).reshape(-1))
        if len(send) != size or min(send) < 0 or sum(send) > d0:
            raise InvalidArgumentError("alltoall: splits=%s must hold %d ints >= 0 summing to "
                                       "at most the first dimension %d" % (list(send), size, d0),
                                       1)
    received = tuple(int(s) for s in _exchange(send, ps, size, rank)[:, rank])
    out = _alltoall(x, ps, send, received)
    return out if splits is None else (out, jnp.asarray(received, dtype=jnp.int32))


def barrier(process_set: Optional[_sets.ProcessSet] = _sets.global_process_set) -> None:
    """Returns once every rank of the set entered the barrier (eagerly: waits
    for it and for the tutti ops before it; inside jit: an op of the program,
    ordered with its other tutti ops)."""
    ps, _, _ = _where(process_set)
    collective("tutti_barrier", [], [], process_set=np.int32(ps))
    if core.trace_state_clean():  # eager, not inside a trace
        jax.effects_barrier()

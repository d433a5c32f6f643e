"""One JAX primitive for every tutti collective, with an ordered effect.

collective(target, operands, out_avals, **attrs) binds `tutti_collective`,
which lowers to the XLA custom call `target` (a handler of libtutti_jax.so,
registered by tutti.jax._loader) with an XLA token as its first operand and
result. The primitive carries TuttiEffect, which this module makes an
*ordered* effect: JAX threads one token through every tutti op of a program
(so XLA can neither reorder nor drop them, and runs them one after another)
and, between programs, starts a program with tutti ops only after the
previous one's finished. Hence every rank runs its tutti ops in its Python
program order, the ordered lane's contract (docs/ordered-lane.md), under
jax.jit and eagerly alike. The effect is also allowed in control flow,
custom_vjp/custom_jvp and remat, where the ops stay in that order.

This uses JAX's effect registry (jax._src.effects) and primitive dispatch
(jax._src.dispatch), as mpi4jax does: they have no public equivalent (written
for jax 0.10, scripts/install-deps --jax).

Errors raised by a handler reach Python as jax's JaxRuntimeError (when the
result is used or waited for: XLA runs asynchronously) with a message that
starts "[tutti status N: name]"; translated() turns those into the tutti
error of status N (tutti.errors), e.g. MismatchError or PeerLostError.
"""

import contextlib
import re
from functools import partial

import jax
import numpy as np
from jax._src import core, dispatch, effects
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from tutti.errors import error_for


class TuttiEffect(effects.Effect):
    """The effect of a tutti collective: it talks to the other ranks."""

    def __str__(self):
        return "TuttiEffect"


EFFECT = TuttiEffect()
effects.ordered_effects.add_type(TuttiEffect)
effects.lowerable_effects.add_type(TuttiEffect)
effects.control_flow_allowed_effects.add_type(TuttiEffect)
effects.custom_derivatives_allowed_effects.add_type(TuttiEffect)
effects.remat_allowed_effects.add_type(TuttiEffect)

collective_p = Primitive("tutti_collective")
collective_p.multiple_results = True
collective_p.def_impl(partial(dispatch.apply_primitive, collective_p))


def _abstract_eval(*avals, target, attrs, out_avals):
    del avals, target, attrs
    return out_avals, {EFFECT}


collective_p.def_effectful_abstract_eval(_abstract_eval)


def _attribute(value):
    """A params value (hashable) as the FFI attribute the handler decodes."""
    if isinstance(value, tuple):
        return np.asarray(value, dtype=np.int64)
    return value


def _lowering(ctx, *operands, target, attrs, out_avals):
    del out_avals
    token = ctx.tokens_in.get(EFFECT)
    with_token = ctx.replace(avals_in=[core.abstract_token, *ctx.avals_in],
                             avals_out=[core.abstract_token, *ctx.avals_out])
    call = jax.ffi.build_ffi_lowering_function(target, has_side_effect=True)(
        with_token, token, *operands, **{k: _attribute(v) for k, v in attrs})
    results = list(call.results)
    ctx.set_tokens_out(mlir.TokenSet({EFFECT: results[0]}))
    return results[1:]


mlir.register_lowering(collective_p, _lowering, platform="cpu")

# Ops whose result has the operand's shape, element by element: under vmap
# the batch dimension is just more elements (every rank must vmap alike).
_ELEMENTWISE = ("tutti_allreduce", "tutti_broadcast")


def _batching(args, dims, *, target, attrs, out_avals):
    if target not in _ELEMENTWISE:
        raise NotImplementedError(
            "jax.vmap of %s: only allreduce, grouped_allreduce and broadcast have a batching "
            "rule (their result is elementwise); call the op on the stacked array instead"
            % target.replace("tutti_", ""))
    del out_avals
    out_avals = tuple(core.ShapedArray(a.shape, a.dtype) for a in args)
    outs = collective_p.bind(*args, target=target, attrs=attrs, out_avals=out_avals)
    return outs, list(dims)


batching.primitive_batchers[collective_p] = _batching


def collective(target, operands, out_avals, **attrs):
    """Binds the primitive: the custom call `target` on `operands` (jax
    arrays) with results of `out_avals` (ShapedArrays); attrs become FFI
    attributes (ints as int32, floats as float64: pass numpy scalars; tuples
    as int64 arrays; strings). Returns the list of results."""
    params = tuple(sorted(attrs.items()))
    return collective_p.bind(*operands, target=target, attrs=params,
                             out_avals=tuple(out_avals))


def drop_runtime_token():
    """Forgets JAX's runtime token of tutti's ordered effect (and the output
    tokens it keeps per device), so that the next tutti computation starts a
    fresh token chain instead of inheriting a failed computation's token
    (tutti.jax.elastic's reset). Uses jax._src.dispatch.runtime_tokens."""
    dispatch.runtime_tokens.current_tokens.pop(EFFECT, None)
    dispatch.runtime_tokens.output_runtime_tokens.clear()


_STATUS = re.compile(r"\[tutti status (\d+): [a-z ]+\] ?(.*)", re.S)


def as_tutti_error(error):
    """The tutti error a JaxRuntimeError from a handler stands for, or None."""
    match = _STATUS.search(str(error))
    if match is None:
        return None
    return error_for(int(match.group(1)), match.group(2).strip())


@contextlib.contextmanager
def translated():
    """Re-raises a tutti handler's JaxRuntimeError inside the block as the
    matching tutti error (MismatchError, PeerLostError, ...), from it."""
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        tutti_error = as_tutti_error(e)
        if tutti_error is None:
            raise
        raise tutti_error from e

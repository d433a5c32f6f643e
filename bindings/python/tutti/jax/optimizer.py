"""DistributedOptimizer: an optax GradientTransformation whose gradients are
allreduced across ranks before the wrapped transformation sees them."""

from typing import Any, Optional

import optax

from tutti import process_sets as _sets
from tutti.jax import ops
from tutti.jax.functions import allreduce_tree


def DistributedOptimizer(optimizer: optax.GradientTransformation, op: int = ops.Average,
                         compression: Any = None, gradient_predivide_factor: float = 1.0,
                         process_set: Optional[_sets.ProcessSet] = _sets.global_process_set
                         ) -> optax.GradientTransformation:
    """Wraps `optimizer` (any optax GradientTransformation) as Horovod's
    DistributedOptimizer wraps a framework optimizer: update(grads, state,
    params) first allreduces the gradient pytree (one grouped allreduce,
    fused; op Average by default, or Sum), then runs optimizer.update on the
    result. init is the optimizer's own (state is per rank and stays equal on
    every rank when the parameters and gradients are). compression: a
    tutti.Compression member or spec (e.g. Compression.fp16).
    gradient_predivide_factor f: with Average, gradients are multiplied by
    1/f before the sum and by f/size after it (Horovod's). process_set: the
    ranks that average (every rank of the set must call update alike).
    Usable inside jax.jit (the allreduce is an op of the jitted program)."""
    if gradient_predivide_factor != 1.0 and op != ops.Average:
        raise ValueError("gradient_predivide_factor needs op=Average")
    pre, post, reduce_op = 1.0, 1.0, op
    if gradient_predivide_factor != 1.0:
        size = _sets.set_size(process_set)
        pre, post, reduce_op = (1.0 / gradient_predivide_factor,
                                gradient_predivide_factor / size, ops.Sum)

    inner = optax.with_extra_args_support(optimizer)

    def update(updates, state, params=None, **extra_args):
        averaged = allreduce_tree(updates, reduce_op, pre, post, process_set, compression)
        return inner.update(averaged, state, params, **extra_args)

    return optax.GradientTransformationExtraArgs(inner.init, update)

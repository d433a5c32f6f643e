"""Gradients of tutti.jax's ops against central finite differences of the
job's total loss (one rank's input moved at a time), exact values of the
cotangents each rank receives, vmap, and the optax wrapper.

Convention (Horovod's): the loss of a job is the sum of every rank's loss,
so jax.grad on rank r gives d(sum_q loss_q)/d(x_r). jax.test_util.check_grads
cannot check that: it moves every rank's input at once and compares per rank.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import eager_and_jit

import tutti.jax as hvd


def x_of(r, shape=(4,)):
    return jnp.arange(np.prod(shape), dtype=jnp.float64).reshape(shape) * 0.5 + r + 1.0


@pytest.mark.parametrize("name, fn", [
    ("allreduce sum", lambda a: hvd.allreduce(a, op=hvd.Sum) ** 2),
    ("allreduce average scaled",
     lambda a: hvd.allreduce(a, prescale_factor=3.0, postscale_factor=0.5) ** 3),
    ("grouped", lambda a: hvd.grouped_allreduce([a, a * 2], op=hvd.Sum)[1] ** 2),
    ("allgather", lambda a: jnp.sin(hvd.allgather(a))),
    ("reducescatter", lambda a: hvd.reducescatter(a.reshape(2, 2) ** 2, op=hvd.Average)),
    ("broadcast", lambda a: hvd.broadcast(a ** 2, hvd.size() - 1)),
    ("alltoall", lambda a: hvd.alltoall(jnp.tile(a, hvd.size())) ** 2),
])
def test_gradient_matches_finite_differences(name, fn):
    n, r = hvd.size(), hvd.rank()
    x = x_of(r)
    weights = jnp.cos(jnp.arange(np.prod(jax.eval_shape(fn, x).shape), dtype=jnp.float64)
                      ).reshape(jax.eval_shape(fn, x).shape) + r  # rank-dependent loss

    def local_loss(a):
        return jnp.sum(weights * fn(a))

    def total_loss(a):  # sum over ranks, the same float on every rank
        return float(hvd.allreduce(local_loss(a), op=hvd.Sum))

    grad = jax.grad(local_loss)(x)
    direction = jnp.asarray(np.random.RandomState(7).standard_normal(x.shape))
    eps = 1e-5
    for q in range(n):  # move rank q's input only; every rank runs the same ops
        step = eps * direction if r == q else jnp.zeros_like(x)
        numeric = (total_loss(x + step) - total_loss(x - step)) / (2 * eps)
        analytic = float(hvd.broadcast(jnp.vdot(grad, direction), q))
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6,
                                   err_msg="%s: d(total loss)/d(x of rank %d)" % (name, q))


def test_allreduce_gradient_is_the_sum_of_every_rank_cotangent():
    # loss_r = sum(w_r * allreduce_sum(x)); d(sum_r loss_r)/dx_q = sum_r w_r
    n, r = hvd.size(), hvd.rank()
    for fn in eager_and_jit(jax.grad(lambda a: jnp.sum((r + 1.0) * hvd.allreduce(a, op=hvd.Sum)))):
        np.testing.assert_allclose(fn(x_of(r)), np.full(4, n * (n + 1) / 2))


def test_broadcast_gradient_lands_on_the_root():
    n, r = hvd.size(), hvd.rank()
    g = jax.jit(jax.grad(lambda a: jnp.sum((r + 1.0) * hvd.broadcast(a, 0))))(x_of(r))
    np.testing.assert_allclose(g, np.full(4, n * (n + 1) / 2 if r == 0 else 0.0))


def test_uneven_allgather_gradient():
    n, r = hvd.size(), hvd.rank()
    g = jax.grad(lambda a: jnp.sum(hvd.allgather(a) * (r + 1.0)))(jnp.ones(r + 1))
    np.testing.assert_allclose(g, np.full(r + 1, n * (n + 1) / 2))


def test_min_allreduce_is_not_differentiable():
    with pytest.raises(NotImplementedError, match="Min allreduce"):
        jax.grad(lambda a: jnp.sum(hvd.allreduce(a, op=hvd.Min)))(x_of(0))
    hvd.barrier()  # the forward allreduce ran on every rank; stay in step


def test_vmap_allreduce():
    n, r = hvd.size(), hvd.rank()
    got = jax.vmap(lambda a: hvd.allreduce(a, op=hvd.Sum))(jnp.ones((3, 2)) * r)
    np.testing.assert_allclose(got, np.full((3, 2), n * (n - 1) / 2))


def test_distributed_optimizer_averages_gradients():
    n, r = hvd.size(), hvd.rank()
    params = {"w": jnp.zeros(3)}
    grads = {"w": jnp.full(3, float(r))}
    tx = hvd.DistributedOptimizer(optax.sgd(1.0))
    state = tx.init(params)

    @jax.jit
    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params, state = step(params, state, grads)
    np.testing.assert_allclose(params["w"], np.full(3, -(n - 1) / 2))
    tx = hvd.DistributedOptimizer(optax.sgd(1.0), op=hvd.Sum, compression=hvd.Compression.fp16)
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["w"], np.full(3, -n * (n - 1) / 2))


def test_broadcast_parameters():
    r = hvd.rank()
    params = {"a": jnp.full((2, 2), float(r)), "b": (jnp.arange(3) + r, jnp.float32(r))}
    got = hvd.broadcast_parameters(params, root_rank=0)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(params)
    np.testing.assert_array_equal(got["a"], np.zeros((2, 2)))
    np.testing.assert_array_equal(got["b"][0], np.arange(3))
    assert float(got["b"][1]) == 0.0

"""One worker of run_jax_tests.py elastic-kill: a jitted training loop of a
small MLP under @tutti.jax.elastic.run with a tutti.jax.elastic.State of its
params and optax state, gradients averaged by tutti.jax.DistributedOptimizer,
printing the lines tests/python/elastic_example_jobs.py reads:

    commit: generation G rank R size N epoch E batch B step S
    step-time: generation G rank R size N step S time T
    rank R: parameter checksum D (sum X)                      (at the end)
"""

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import tutti.jax as hvd
from tutti import elastic as tutti_elastic
from tutti.jax import elastic

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
from jax_fashion_mnist import checksum  # noqa: E402 (the example's parameter checksum)

STEPS, COMMIT_EVERY, BATCH = 120, 5, 16


def where():
    return "generation %d rank %d size %d" % (tutti_elastic.generation(), hvd.rank(),
                                               hvd.size())


def data_and_params():
    """(x, y, params): a linear target of 4 features and a small MLP's
    parameters, the same on every worker."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 4)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
    k1, k2 = jax.random.split(jax.random.PRNGKey(7))
    params = {"w1": 0.5 * jax.random.normal(k1, (4, 8)), "b1": jnp.zeros(8),
              "w2": 0.5 * jax.random.normal(k2, (8, 1)), "b2": jnp.zeros(1)}
    return x, y, params


def loss_fn(params, xb, yb):
    h = jax.nn.relu(xb @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - yb) ** 2)


def main():
    hvd.init()
    x, y, params = data_and_params()
    opt = hvd.DistributedOptimizer(optax.sgd(0.01))
    state = elastic.State(params, opt.init(params), epoch=0, batch=0, step=0)

    @jax.jit
    def update(params, opt_state, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @elastic.run
    def train(state):
        while state.step < STEPS:
            start = (state.step * hvd.size() + hvd.rank()) * BATCH % len(x)
            xb, yb = x[start:start + BATCH], y[start:start + BATCH]
            state.params, state.opt_state, loss = update(state.params, state.opt_state, xb, yb)
            float(loss)  # the step's errors surface here, before a commit
            state.step += 1
            state.batch += 1
            print("step-time: %s step %d time %.6f" % (where(), state.step, time.time()),
                  flush=True)
            time.sleep(0.02)
            if state.step % COMMIT_EVERY == 0:
                state.commit()
                print("commit: %s epoch %d batch %d step %d"
                      % (where(), state.epoch, state.batch, state.step), flush=True)

    train(state)
    digest, total = checksum(state.params)
    print("rank %d: parameter checksum %s (sum %.10e)" % (hvd.rank(), digest, total), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())

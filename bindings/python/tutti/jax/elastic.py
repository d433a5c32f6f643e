"""Elastic training with tutti.jax (docs/elastic.md): State for a params and
optimizer-state pytree plus plain values, and run() for the training function.

    state = tutti.jax.elastic.State(params, opt_state, epoch=0)

    @tutti.jax.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...  # state.params, state.opt_state = step(state.params, state.opt_state, ...)
            state.commit()

A lost peer surfaces from XLA as JaxRuntimeError ("[tutti status 3: peer
lost]"); run() turns it into tutti's PeerLostError, restores the last commit,
leaves the generation, joins the next and syncs the state from the rank with
the newest commit. Block on a result (float(loss)) before commit() so that a
step's error is seen before its state is committed. Thread-safety: one
training thread per process.
"""

import warnings

import jax
import jax.numpy as jnp

from tutti import _placement
from tutti import elastic as _elastic
from tutti.errors import TuttiIOError, WaitTimeoutError
from tutti.jax import _primitive
from tutti.jax._primitive import translated
from tutti.jax.functions import allgather_object, broadcast_object, broadcast_parameters


class State(_elastic.ObjectState):
    """params and opt_state (pytrees of arrays; opt_state may be None) and
    plain picklable values as keyword arguments (state.epoch). save() keeps
    host (numpy) copies of both pytrees, restore() puts them back as jax
    arrays, sync() broadcasts both from the sync root (tutti.elastic.State.
    sync_root) and the plain values with broadcast_object."""

    def __init__(self, params, opt_state=None, **kwargs):
        self.params = params
        self.opt_state = opt_state
        self._saved_trees = jax.device_get((params, opt_state))
        super().__init__(bcast_object=broadcast_object, get_rank=_placement.rank,
                         allgather_object=allgather_object, **kwargs)

    def save(self):
        self._saved_trees = jax.device_get((self.params, self.opt_state))
        super().save()

    def restore(self):
        self.params, self.opt_state = jax.tree_util.tree_map(jnp.asarray, self._saved_trees)
        super().restore()

    def sync(self):
        with translated():
            root = self.sync_root()
            self.params, self.opt_state = broadcast_parameters((self.params, self.opt_state),
                                                               root_rank=root)
            self._saved_trees = jax.device_get((self.params, self.opt_state))
            self._sync_values(root)


def run(func):
    """Decorator: runs func(state, *args, **kwargs) elastically (see the
    module's docstring and tutti.elastic.run_fn)."""

    def translated_func(state, *args, **kwargs):
        with translated():
            return func(state, *args, **kwargs)

    return _elastic.run_fn(translated_func, _reset)


def _reset():
    """Leaves the generation (warning when the report to the driver failed),
    drops JAX's runtime token of tutti's ordered effect, and joins the next
    one. The token matters: JAX threads the previous tutti computation's
    output token into the next one, and after a failed op (the lost peer)
    that token holds the error, so every later tutti op, the new
    generation's sync included, would fail with it again."""
    try:
        _elastic.leave()
    except (WaitTimeoutError, TuttiIOError) as e:
        warnings.warn("tutti.jax.elastic: leaving generation: %s; joining the next one anyway"
                      % e, stacklevel=1)
    _primitive.drop_runtime_token()
    _elastic.join()

"""tutti.jax.elastic.State outside an elastic job: commit/restore keep the
committed pytrees and values, sync takes them from the rank with the newest
commit (here every rank committed alike: rank 0)."""

import jax.numpy as jnp
import numpy as np

import tutti.jax as hvd
from tutti.jax import elastic


def test_commit_restore_sync():
    r = hvd.rank()
    state = elastic.State({"w": jnp.full(3, float(r))}, opt_state=(jnp.zeros(2),), epoch=r)
    state.commit()
    state.params = {"w": jnp.full(3, 100.0)}
    state.epoch = 99
    state.restore()
    np.testing.assert_array_equal(state.params["w"], np.full(3, float(r)))
    assert state.epoch == r
    state.sync()
    np.testing.assert_array_equal(state.params["w"], np.zeros(3))
    assert state.epoch == 0
    state.params = {"w": jnp.ones(3)}
    state.restore()  # sync saved rank 0's values as the commit
    np.testing.assert_array_equal(state.params["w"], np.zeros(3))
    np.testing.assert_array_equal(state.opt_state[0], np.zeros(2))

"""A job of tutti.jax as `pip install --no-build-isolation .` installed it in
the JAX venv: no source tree, no TUTTI_LIBRARY, no TUTTI_JAX_LIBRARY
(run_jax_tests.py wheel). Checks that the package and its handler library
come from the installed wheel, and an allreduce (eagerly and under jit) and
an uneven allgather against values computed here."""

import os

import jax
import jax.numpy as jnp
import numpy as np

import tutti
import tutti.jax as hvd
from tutti.jax import _loader


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    package = os.path.dirname(os.path.abspath(tutti.__file__))
    assert "site-packages" in package, "tutti imported from %s, not the venv" % package
    handlers = os.path.join(package, "jax", _loader.LIBRARY_NAME)
    assert os.path.exists(handlers), "the wheel holds no %s" % handlers
    assert _loader.candidate_paths()[0] == handlers, _loader.candidate_paths()
    x = jnp.array([1.0 + r, 2.0 * r], dtype=jnp.float32)
    expected = [sum(1.0 + k for k in range(n)), sum(2.0 * k for k in range(n))]
    np.testing.assert_allclose(np.asarray(hvd.allreduce(x, op=hvd.Sum)), expected)
    summed = jax.jit(lambda v: hvd.allreduce(v, op=hvd.Sum))(x)
    np.testing.assert_allclose(np.asarray(summed), expected)
    gathered = hvd.allgather(jnp.full((r + 1, 2), r, dtype=jnp.int32))
    expected = np.concatenate([np.full((k + 1, 2), k) for k in range(n)])
    np.testing.assert_array_equal(np.asarray(gathered), expected)
    hvd.shutdown()
    print("rank %d: OK (%s)" % (r, handlers), flush=True)


if __name__ == "__main__":
    main()

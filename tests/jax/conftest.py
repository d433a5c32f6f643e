"""Shared fixtures of the tutti.jax tests (run on every rank under tuttirun
by tests/jax/run_jax_tests.py, with build/jax-venv's Python)."""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed in this Python "
                          "(scripts/install-deps --jax makes build/jax-venv)")
jax.config.update("jax_enable_x64", True)  # int64/float64/complex128 as themselves

import jax.numpy as jnp  # noqa: E402

import tutti.jax as hvd  # noqa: E402
from tutti import _library  # noqa: E402

# Every dtype jax has on CPU that tutti takes; uint16/32/64 where the loaded
# libtutti has them (tutti_dtype 10-12, newer than the first C API).
_UNSIGNED = [d for d, code in [("uint16", 10), ("uint32", 11), ("uint64", 12)]
             if _library.load().tutti_dtype_size(code)]
DTYPES = ["bool", "uint8", *_UNSIGNED, "int8", "int16", "int32", "int64", "float16",
          "bfloat16", "float32", "float64", "complex64", "complex128"]
NUMERIC = [d for d in DTYPES if d != "bool"]
REAL = [d for d in NUMERIC if not d.startswith("complex")]


@pytest.fixture(scope="session", autouse=True)
def job():
    hvd.init()
    yield
    hvd.shutdown()


def rank_value(r, shape, dtype):
    """Rank r's input as a numpy array: values 1..3 (bool: r's parity;
    complex: a real and an imaginary part), so that sums and products over 3
    ranks are exact in every dtype."""
    n = int(np.prod(shape))
    if dtype == "bool":
        return ((np.arange(n) + r) % 2 == 0).reshape(shape)
    base = ((np.arange(n) + r) % 3 + 1).reshape(shape)
    if dtype.startswith("complex"):
        return (base + 1j * (base % 2)).astype(dtype)
    return base.astype(jnp.dtype(dtype))


def as_ref(x):
    """An array as float64/complex128 numpy, for comparisons."""
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def eager_and_jit(fn):
    """fn itself and fn under jax.jit: the two ways every op must work."""
    return [fn, jax.jit(fn)]

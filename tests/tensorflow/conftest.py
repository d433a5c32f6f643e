"""Shared fixtures of the tutti.tensorflow tests (run on every rank under
tuttirun by tests/tensorflow/run_tf_tests.py, with build/tf-venv's Python)."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed in this Python "
                         "(scripts/install-deps --tensorflow makes build/tf-venv)")

import tutti.tensorflow as hvd  # noqa: E402

# Every dtype the ops take: (TensorFlow dtype, numpy dtype of the reference).
DTYPES = [tf.uint8, tf.uint16, tf.uint32, tf.uint64, tf.int8, tf.int16, tf.int32, tf.int64,
          tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.bool]
NUMERIC = [d for d in DTYPES if d != tf.bool]
FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


@pytest.fixture(scope="session", autouse=True)
def job():
    hvd.init()
    yield
    hvd.shutdown()


def rank_value(r, shape, dtype):
    """Rank r's input: values 1..3 (bool: r's parity), so that sums and
    products over 3 ranks fit every dtype exactly."""
    n = int(np.prod(shape))
    if dtype == tf.bool:
        return ((np.arange(n) + r) % 2 == 0).reshape(shape)
    base = ((np.arange(n) + r) % 3 + 1).reshape(shape)
    return base.astype(dtype.as_numpy_dtype)


def as_f64(x):
    return np.asarray(x).astype(np.float64)

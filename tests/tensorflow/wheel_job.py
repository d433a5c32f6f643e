"""A job of tutti.tensorflow as `pip install --no-build-isolation .` installed
it in the TensorFlow venv: no source tree, no TUTTI_LIBRARY, no
TUTTI_TF_LIBRARY (run_tf_tests.py wheel). Checks that the package, its
libtutti.so and its libtutti_tensorflow.so all come from the installed wheel,
and an allreduce and an uneven allgather against values computed here."""

import os

import numpy as np
import tensorflow as tf

import tutti
import tutti.tensorflow as hvd
from tutti.tensorflow import _loader


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    package = os.path.dirname(os.path.abspath(tutti.__file__))
    assert "site-packages" in package, "tutti imported from %s, not the venv" % package
    op_library = os.path.join(package, "tensorflow", _loader.LIBRARY_NAME)
    assert os.path.exists(op_library), "the wheel holds no %s" % op_library
    assert _loader.candidate_paths()[0] == op_library, _loader.candidate_paths()
    summed = hvd.allreduce(tf.constant([1.0 + r, 2.0 * r]), op=hvd.Sum, name="wheel.sum")
    expected = [sum(1.0 + k for k in range(n)), sum(2.0 * k for k in range(n))]
    np.testing.assert_allclose(summed.numpy(), expected)
    gathered = hvd.allgather(tf.fill([r + 1, 2], r), name="wheel.gather")
    expected = np.concatenate([np.full((k + 1, 2), k) for k in range(n)])
    np.testing.assert_array_equal(gathered.numpy(), expected)
    hvd.shutdown()
    print("rank %d: OK (%s)" % (r, op_library), flush=True)


if __name__ == "__main__":
    main()

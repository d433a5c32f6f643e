"""Finds and loads tutti's TensorFlow op library, libtutti_tensorflow.so.

The library (bindings/tensorflow in the source) holds the custom ops
(TuttiAllreduce, ...) compiled against one TensorFlow's headers; where it is
looked for, the version stamp beside it (libtutti_tensorflow.tf-version) and
the errors: tutti._op_library. Loaded with tf.load_op_library.
"""

import os

import tensorflow as tf

from tutti import _op_library

LIBRARY_NAME = "libtutti_tensorflow.so"
LIBRARY = _op_library.OpLibrary(
    package="tensorflow", library_name=LIBRARY_NAME, env_var="TUTTI_TF_LIBRARY",
    framework="TensorFlow", version=tf.__version__, module_file=tf.__file__,
    stamp_suffix=".tf-version", install_flag="--tensorflow",
    cmake_python="TUTTI_TENSORFLOW_PYTHON", target="tutti_tensorflow")
_HERE = os.path.dirname(os.path.abspath(__file__))


def candidate_paths():
    """The paths tried, in order (missing ones are skipped)."""
    return _op_library.candidate_paths(LIBRARY, _HERE)


def load():
    """Loads the op library; returns TensorFlow's module of its op wrappers.

    Raises ImportError naming every path tried and how to build the library.
    """
    return tf.load_op_library(_op_library.find(LIBRARY, _HERE))

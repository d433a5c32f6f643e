"""Finds and loads tutti's TensorFlow op library, libtutti_tensorflow.so.

The library (bindings/tensorflow in the source) holds the custom ops
(TuttiAllreduce, ...) compiled against one TensorFlow's headers: CMake builds
it when it knows a Python with TensorFlow (-DTUTTI_TENSORFLOW_PYTHON=..., or
build/tf-venv made by scripts/install-deps --tensorflow). Searched in this
order: $TUTTI_TF_LIBRARY (a file), this package's directory, the directory of
the loaded libtutti.so plus ../tensorflow (a build tree:
build/bindings/c -> build/bindings/tensorflow), <repo>/build/bindings/tensorflow.

libtutti is loaded first (tutti._library, honouring $TUTTI_LIBRARY), so that
the op library, which links libtutti.so.0, uses the same copy as the rest of
tutti. A libtutti_tensorflow.tf-version file beside the library names the
TensorFlow it was built against; another TensorFlow is refused (ImportError
naming both), as Horovod refuses a framework version it was not built for.
"""

import os

import tensorflow as tf

from tutti import _library

LIBRARY_NAME = "libtutti_tensorflow.so"


def candidate_paths():
    """The paths tried, in order (missing ones are skipped)."""
    paths = []
    env = os.environ.get("TUTTI_TF_LIBRARY")
    if env:
        paths.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    paths.append(os.path.join(here, LIBRARY_NAME))
    lib_name = getattr(_library.load(), "_name", None)
    if lib_name and os.path.sep in lib_name:
        c_dir = os.path.dirname(os.path.realpath(lib_name))
        paths.append(os.path.join(os.path.dirname(c_dir), "tensorflow", LIBRARY_NAME))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))
    paths.append(os.path.join(repo, "build", "bindings", "tensorflow", LIBRARY_NAME))
    return paths


def _check_version(path):
    """ImportError when the library's recorded TensorFlow is not this one."""
    stamp = os.path.splitext(path)[0] + ".tf-version"
    if not os.path.exists(stamp):
        return
    with open(stamp) as f:
        built = f.read().strip()
    if built and built != tf.__version__:
        raise ImportError(
            "%s was built against TensorFlow %s but this process runs TensorFlow %s (%s): "
            "rebuild it (scripts/build, with -DTUTTI_TENSORFLOW_PYTHON pointing at this "
            "Python)" % (path, built, tf.__version__, tf.__file__))


def load():
    """Loads the op library; returns TensorFlow's module of its op wrappers.

    Raises ImportError naming every path tried and how to build the library.
    """
    _library.load()  # libtutti first: the op library resolves against this copy
    tried = []
    for path in candidate_paths():
        if not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        _check_version(path)
        return tf.load_op_library(path)
    if not os.environ.get("TUTTI_TF_LIBRARY"):
        tried.insert(0, "$TUTTI_TF_LIBRARY (unset)")
    raise ImportError(
        "tutti.tensorflow needs its TensorFlow op library %s, built against this TensorFlow "
        "(%s, %s), and it was not found. Build it: scripts/install-deps --tensorflow (makes "
        "build/tf-venv) then scripts/build, or configure CMake with "
        "-DTUTTI_TENSORFLOW_PYTHON=<this python> and build the target tutti_tensorflow; or set "
        "TUTTI_TF_LIBRARY to the built file. Tried: %s"
        % (LIBRARY_NAME, tf.__version__, tf.__file__, "; ".join(tried)))

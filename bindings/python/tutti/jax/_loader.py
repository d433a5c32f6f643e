"""Finds tutti's XLA FFI handler library, libtutti_jax.so, and registers it.

The library (bindings/jax in the source) holds the typed-FFI handlers
TuttiJaxAllreduce, ... compiled against one jaxlib's XLA FFI headers; where
it is looked for, the version stamp beside it (libtutti_jax.jax-version) and
the errors: tutti._op_library. Thread-safety: load() may be called from any
thread; it registers once.
"""

import ctypes
import os
import threading

import jax
import jaxlib

from tutti import _op_library

LIBRARY_NAME = "libtutti_jax.so"
LIBRARY = _op_library.OpLibrary(
    package="jax", library_name=LIBRARY_NAME, env_var="TUTTI_JAX_LIBRARY",
    framework="jaxlib", version=jaxlib.__version__, module_file=jaxlib.__file__,
    stamp_suffix=".jax-version", install_flag="--jax", cmake_python="TUTTI_JAX_PYTHON",
    target="tutti_jax")
_HERE = os.path.dirname(os.path.abspath(__file__))
# Handler symbol -> the custom-call target name registered with XLA.
HANDLERS = {
    "TuttiJaxAllreduce": "tutti_allreduce",
    "TuttiJaxAllgather": "tutti_allgather",
    "TuttiJaxBroadcast": "tutti_broadcast",
    "TuttiJaxAlltoall": "tutti_alltoall",
    "TuttiJaxReducescatter": "tutti_reducescatter",
    "TuttiJaxBarrier": "tutti_barrier",
}

_lock = threading.Lock()
_loaded = None


def candidate_paths():
    """The paths tried, in order (missing ones are skipped)."""
    return _op_library.candidate_paths(LIBRARY, _HERE)


def load():
    """Loads the handler library and registers its targets for the CPU
    platform (once per process); returns the ctypes.CDLL.

    Raises ImportError naming every path tried and how to build the library.
    """
    global _loaded
    with _lock:
        if _loaded is None:
            lib = ctypes.CDLL(_op_library.find(LIBRARY, _HERE))
            for symbol, target in HANDLERS.items():
                jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)),
                                            platform="cpu")
            _loaded = lib
        return _loaded

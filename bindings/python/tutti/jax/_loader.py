"""Finds tutti's XLA FFI handler library, libtutti_jax.so, and registers it.

The library (bindings/jax in the source) holds the typed-FFI handlers
TuttiJaxAllreduce, ... compiled against one jaxlib's XLA FFI headers: CMake
builds it when it knows a Python with jax (-DTUTTI_JAX_PYTHON=..., or
build/jax-venv made by scripts/install-deps --jax). Searched in this order:
$TUTTI_JAX_LIBRARY (a file), this package's directory (the wheel), the
directory of the loaded libtutti.so plus ../jax (a build tree:
build/bindings/c -> build/bindings/jax), <repo>/build/bindings/jax.

libtutti is loaded first (tutti._library, honouring $TUTTI_LIBRARY), so that
the handler library, which links libtutti.so.0, uses the same copy as the rest
of tutti. A libtutti_jax.jax-version file beside the library names the jaxlib
it was built against; another jaxlib is refused (ImportError naming both).
Thread-safety: load() may be called from any thread; it registers once.
"""

import ctypes
import os
import threading

import jax
import jaxlib

from tutti import _library

LIBRARY_NAME = "libtutti_jax.so"
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
    paths = []
    env = os.environ.get("TUTTI_JAX_LIBRARY")
    if env:
        paths.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    paths.append(os.path.join(here, LIBRARY_NAME))
    lib_name = getattr(_library.load(), "_name", None)
    if lib_name and os.path.sep in lib_name:
        c_dir = os.path.dirname(os.path.realpath(lib_name))
        paths.append(os.path.join(os.path.dirname(c_dir), "jax", LIBRARY_NAME))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))
    paths.append(os.path.join(repo, "build", "bindings", "jax", LIBRARY_NAME))
    return paths


def _check_version(path):
    """ImportError when the library's recorded jaxlib is not this one."""
    stamp = os.path.splitext(path)[0] + ".jax-version"
    if not os.path.exists(stamp):
        return
    with open(stamp) as f:
        built = f.read().strip()
    if built and built != jaxlib.__version__:
        raise ImportError(
            "%s was built against jaxlib %s but this process runs jaxlib %s (%s): rebuild it "
            "(scripts/build, with -DTUTTI_JAX_PYTHON pointing at this Python)"
            % (path, built, jaxlib.__version__, jaxlib.__file__))


def load():
    """Loads the handler library and registers its targets for the CPU
    platform (once per process); returns the ctypes.CDLL.

    Raises ImportError naming every path tried and how to build the library.
    """
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        _library.load()  # libtutti first: the handlers resolve against this copy
        tried = []
        for path in candidate_paths():
            if not os.path.exists(path):
                tried.append(path + " (missing)")
                continue
            _check_version(path)
            lib = ctypes.CDLL(path)
            for symbol, target in HANDLERS.items():
                jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)),
                                            platform="cpu")
            _loaded = lib
            return lib
    if not os.environ.get("TUTTI_JAX_LIBRARY"):
        tried.insert(0, "$TUTTI_JAX_LIBRARY (unset)")
    raise ImportError(
        "tutti.jax needs its XLA FFI library %s, built against this jaxlib (%s, %s), and it was "
        "not found. Build it: scripts/install-deps --jax (makes build/jax-venv) then "
        "scripts/build, or configure CMake with -DTUTTI_JAX_PYTHON=<this python> and build the "
        "target tutti_jax; or set TUTTI_JAX_LIBRARY to the built file. Tried: %s"
        % (LIBRARY_NAME, jaxlib.__version__, jaxlib.__file__, "; ".join(tried)))

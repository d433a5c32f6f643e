"""Finds and loads libtutti.so and declares the C API's signatures (ctypes).

The library is searched in this order: the TUTTI_LIBRARY environment variable
(a file path), this package's directory, <repo>/build/bindings/c for a source
checkout, then the system's linker path (ldconfig), then libtutti.so.0 as the
dynamic linker finds it (LD_LIBRARY_PATH, ld.so.cache). Thread-safety: load() may
be called from any thread; the library is loaded once per process.
"""

import ctypes
import ctypes.util
import glob
import os
import threading
from typing import Any, Dict, Optional, Tuple

from tutti.errors import error_for

ABI_MAJOR = 0  # the SOVERSION this package speaks

c_handle = ctypes.c_int64


class TensorDesc(ctypes.Structure):
    """Mirror of struct tutti_tensor (tutti.h)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("device", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
    ]


class OpOptions(ctypes.Structure):
    """Mirror of struct tutti_op_options (tutti.h); fill with tutti_op_options_init."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("process_set_id", ctypes.c_int32),
        ("compression", ctypes.c_char_p),
        ("ordered", ctypes.c_int32),
    ]


_T = ctypes.POINTER(TensorDesc)
_OPTS = ctypes.POINTER(OpOptions)
_H = ctypes.POINTER(c_handle)
_INTS = ctypes.POINTER(ctypes.c_int)

_SIGNATURES = {
    "tutti_version": (ctypes.c_char_p, [ctypes.POINTER(ctypes.c_int)] * 3),
    "tutti_built_with": (ctypes.c_int, [ctypes.c_char_p]),
    "tutti_set_cuda_stream": (ctypes.c_int, [ctypes.c_void_p]),
    "tutti_last_error": (ctypes.c_char_p, []),
    "tutti_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "tutti_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "tutti_init": (ctypes.c_int, []),
    "tutti_shutdown": (ctypes.c_int, []),
    "tutti_is_initialized": (ctypes.c_int, []),
    "tutti_rank": (ctypes.c_int, []),
    "tutti_size": (ctypes.c_int, []),
    "tutti_local_rank": (ctypes.c_int, []),
    "tutti_local_size": (ctypes.c_int, []),
    "tutti_cross_rank": (ctypes.c_int, []),
    "tutti_cross_size": (ctypes.c_int, []),
    "tutti_allreduce_async": (
        ctypes.c_int,
        [ctypes.POINTER(TensorDesc), ctypes.POINTER(TensorDesc), ctypes.c_char_p, ctypes.c_int,
         ctypes.c_double, ctypes.c_double, ctypes.POINTER(c_handle)],
    ),
    "tutti_grouped_allreduce_async": (
        ctypes.c_int,
        [ctypes.c_int, ctypes.POINTER(TensorDesc), ctypes.POINTER(TensorDesc), ctypes.c_char_p,
         ctypes.c_int, ctypes.c_double, ctypes.c_double, ctypes.POINTER(c_handle)],
    ),
    "tutti_allreduce_async_ex": (
        ctypes.c_int,
        [ctypes.POINTER(TensorDesc), ctypes.POINTER(TensorDesc), ctypes.c_char_p, ctypes.c_int,
         ctypes.c_double, ctypes.c_double, ctypes.c_char_p, ctypes.POINTER(c_handle)],
    ),
    "tutti_grouped_allreduce_async_ex": (
        ctypes.c_int,
        [ctypes.c_int, ctypes.POINTER(TensorDesc), ctypes.POINTER(TensorDesc), ctypes.c_char_p,
         ctypes.c_int, ctypes.c_double, ctypes.c_double, ctypes.c_char_p,
         ctypes.POINTER(c_handle)],
    ),
    "tutti_bytes_sent": (ctypes.c_uint64, []),
    "tutti_allgather_async": (
        ctypes.c_int, [ctypes.POINTER(TensorDesc), ctypes.c_char_p, ctypes.POINTER(c_handle)]),
    "tutti_broadcast_async": (
        ctypes.c_int,
        [ctypes.POINTER(TensorDesc), ctypes.POINTER(TensorDesc), ctypes.c_int, ctypes.c_char_p,
         ctypes.POINTER(c_handle)],
    ),
    "tutti_alltoall_async": (
        ctypes.c_int,
        [ctypes.POINTER(TensorDesc), ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
         ctypes.c_char_p, ctypes.POINTER(c_handle)],
    ),
    "tutti_reducescatter_async": (
        ctypes.c_int,
        [ctypes.POINTER(TensorDesc), ctypes.c_char_p, ctypes.c_int, ctypes.c_double,
         ctypes.c_double, ctypes.POINTER(c_handle)],
    ),
    "tutti_barrier_async": (ctypes.c_int, [ctypes.POINTER(c_handle)]),
    "tutti_join_async": (ctypes.c_int, [ctypes.POINTER(c_handle)]),
    "tutti_poll": (ctypes.c_int, [c_handle]),
    "tutti_wait": (ctypes.c_int, [c_handle, ctypes.c_double]),
    "tutti_handle_message": (
        ctypes.c_size_t,
        [c_handle, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t],
    ),
    "tutti_handle_output": (ctypes.c_int, [c_handle, ctypes.POINTER(TensorDesc)]),
    "tutti_handle_output_copy": (ctypes.c_int, [c_handle, ctypes.c_void_p, ctypes.c_size_t]),
    "tutti_handle_received_splits": (
        ctypes.c_int,
        [c_handle, ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.POINTER(ctypes.c_int)],
    ),
    "tutti_handle_join_result": (ctypes.c_int, [c_handle, ctypes.POINTER(ctypes.c_int)]),
    "tutti_release": (ctypes.c_int, [c_handle]),
    "tutti_start_timeline": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int]),
    "tutti_stop_timeline": (ctypes.c_int, []),
}

# Functions newer than some libtutti builds (elastic training, docs/elastic.md):
# declared when the loaded library has them; function() raises a clear error
# when it does not, so that importing tutti never fails on an older library.
_OPTIONAL_SIGNATURES = {
    "tutti_elastic_enabled": (ctypes.c_int, []),
    "tutti_elastic_generation": (ctypes.c_int64, []),
    "tutti_elastic_leave": (ctypes.c_int, []),
    "tutti_elastic_join": (ctypes.c_int, []),
    "tutti_elastic_hosts_updated": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]),
    "tutti_get_compression_residuals": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t,
                                                       ctypes.POINTER(ctypes.c_size_t)]),
    "tutti_set_compression_residuals": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
    # Build and state queries (tutti.basics: nccl_built, mpi_enabled, ...).
    "tutti_nccl_version": (ctypes.c_int, []),
    "tutti_backend": (ctypes.c_char_p, []),
    "tutti_mpi_threads_supported": (ctypes.c_int, []),
    # Per-op options and process sets (tutti.process_sets, docs/process-sets.md).
    "tutti_op_options_init": (ctypes.c_int, [_OPTS]),
    "tutti_allreduce_async_opts": (
        ctypes.c_int, [_T, _T, ctypes.c_char_p, ctypes.c_int, ctypes.c_double, ctypes.c_double,
                       _OPTS, _H]),
    "tutti_grouped_allreduce_async_opts": (
        ctypes.c_int, [ctypes.c_int, _T, _T, ctypes.c_char_p, ctypes.c_int, ctypes.c_double,
                       ctypes.c_double, _OPTS, _H]),
    "tutti_allgather_async_opts": (ctypes.c_int, [_T, ctypes.c_char_p, _OPTS, _H]),
    "tutti_allgather_into_async_opts": (ctypes.c_int, [_T, _T, ctypes.c_char_p, _OPTS, _H]),
    "tutti_broadcast_async_opts": (
        ctypes.c_int, [_T, _T, ctypes.c_int, ctypes.c_char_p, _OPTS, _H]),
    "tutti_alltoall_async_opts": (
        ctypes.c_int, [_T, ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_char_p, _OPTS,
                       _H]),
    "tutti_reducescatter_async_opts": (
        ctypes.c_int, [_T, ctypes.c_char_p, ctypes.c_int, ctypes.c_double, ctypes.c_double,
                       _OPTS, _H]),
    "tutti_barrier_async_opts": (ctypes.c_int, [_OPTS, _H]),
    # Point-to-point messages (tutti.torch.p2p, tutti_p2p.h).
    "tutti_send_async": (ctypes.c_int, [_T, ctypes.c_int, ctypes.c_int, _OPTS, _H]),
    "tutti_recv_async": (ctypes.c_int, [_T, ctypes.c_int, ctypes.c_int, _OPTS, _H]),
    # Completion callbacks (tutti.torch.distributed._completion).
    "tutti_handle_on_complete": (ctypes.c_int, [c_handle, ctypes.c_void_p, ctypes.c_void_p]),
    "tutti_add_process_set": (ctypes.c_int, [_INTS, ctypes.c_int, _INTS]),
    "tutti_remove_process_set": (ctypes.c_int, [ctypes.c_int]),
    "tutti_process_set_info": (ctypes.c_int, [ctypes.c_int, _INTS, _INTS]),
    "tutti_process_set_ranks": (ctypes.c_int, [ctypes.c_int, _INTS, ctypes.c_int, _INTS]),
    "tutti_process_set_ids": (ctypes.c_int, [_INTS, ctypes.c_int, _INTS]),
}

_lock = threading.Lock()
_lib = None


def candidate_paths():
    """The paths tried, in order (a missing one is skipped)."""
    paths = []
    env = os.environ.get("TUTTI_LIBRARY")
    if env:
        paths.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    paths += sorted(glob.glob(os.path.join(here, "libtutti.so*")))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    paths.append(os.path.join(repo, "build", "bindings", "c", "libtutti.so"))
    found = ctypes.util.find_library("tutti")
    if found:
        paths.append(found)
    # The soname, as the dynamic linker finds it (LD_LIBRARY_PATH, ld.so.cache:
    # Debian's libtutti0 has no libtutti.so, which find_library looks for).
    paths.append("libtutti.so.%d" % ABI_MAJOR)
    return paths


def load():
    """Returns the loaded ctypes.CDLL. Raises OSError naming every path tried."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidate_paths():
            if os.path.sep in path and not os.path.exists(path):
                tried.append(path + " (missing)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            for name, (restype, argtypes) in _OPTIONAL_SIGNATURES.items():
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = restype
                    fn.argtypes = argtypes
            major = ctypes.c_int()
            lib.tutti_version(ctypes.byref(major), None, None)
            if major.value != ABI_MAJOR:
                tried.append("%s (ABI major %d, this package needs %d)"
                             % (path, major.value, ABI_MAJOR))
                continue
            _lib = lib
            return lib
        if not os.environ.get("TUTTI_LIBRARY"):
            tried.insert(0, "$TUTTI_LIBRARY (unset)")
        here = os.path.dirname(os.path.abspath(__file__))
        if not glob.glob(os.path.join(here, "libtutti.so*")):
            tried.append(os.path.join(here, "libtutti.so*") + " (none)")
        if not ctypes.util.find_library("tutti"):
            tried.append("the system linker path (ldconfig: no libtutti)")
        raise OSError(
            "libtutti.so not found; build it (scripts/build, or ninja -C build tutti) and set "
            "TUTTI_LIBRARY to build/bindings/c/libtutti.so, or install it (cmake --install build) "
            "where the linker finds it. Tried: " + "; ".join(tried)
        )


def has_function(name):
    """True when the loaded libtutti exports the C function `name`."""
    return getattr(load(), name, None) is not None


def function(name):
    """The loaded libtutti's C function `name` (with its signature declared).

    Raises NotImplementedError naming the library file when this libtutti
    predates `name` (one of _OPTIONAL_SIGNATURES), OSError when none loads.
    """
    fn = getattr(load(), name, None)
    if fn is None:
        raise NotImplementedError(
            "%s is missing from the loaded libtutti (%s): it was built before this function "
            "existed; rebuild it (ninja -C build tutti) or point TUTTI_LIBRARY at a newer "
            "libtutti.so" % (name, getattr(load(), "_name", "?")))
    return fn


# (process set id, spec, ordered) -> OpOptions, never changed once made
_options_cache: Dict[Tuple[int, Optional[bytes], bool], Any] = {}


def op_options(process_set_id=0, compression=None, ordered=False):
    """An OpOptions for the *_async_opts functions: the set id, the
    compression spec (bytes or None: the job's) and whether the op takes the
    ordered lane (tutti.h, tutti_op_options.ordered: the caller issues it in
    the same order on every rank of the set). Cached per (set, spec,
    ordered), one ctypes call less per op: callers must not change it (the C
    API only reads options during the enqueue, so one struct serves every
    thread)."""
    key = (int(process_set_id), compression, bool(ordered))
    options = _options_cache.get(key)
    if options is None:
        options = OpOptions()
        function("tutti_op_options_init")(ctypes.byref(options))
        options.process_set_id = key[0]
        options.compression = compression
        options.ordered = 1 if key[2] else 0
        options = _options_cache.setdefault(key, options)
    return options


def last_error():
    """The calling thread's last error message of the C API."""
    return load().tutti_last_error().decode("utf-8", "replace")


def check(rc):
    """Raises the TuttiError subclass for a non-zero status `rc`, with the last error message."""
    if rc != 0:
        raise error_for(rc, last_error())

"""Build and state queries as Horovod's (horovod/common/basics.py): *_built()
against the build's generated tutti/config.h and NCCL's own header,
*_enabled() against the backend the job asked for, is_homogeneous() on one
host. No collectives.
"""

import os
import re

import pytest

import tutti
import tutti.torch as hvd
from tutti import _library

NCCL_HEADERS = ["/usr/local/cuda/include/nccl.h", "/usr/include/nccl.h"]


def _config():
    """The #defines of the generated tutti/config.h next to the loaded libtutti
    (build/bindings/c/libtutti.so -> build/generated/tutti/config.h)."""
    lib = os.path.realpath(_library.load()._name)
    build = os.path.dirname(os.path.dirname(os.path.dirname(lib)))
    path = os.path.join(build, "generated", "tutti", "config.h")
    if not os.path.exists(path):
        pytest.fail("no config.h at %s for the loaded %s" % (path, lib))
    with open(path) as f:
        return dict(re.findall(r"^#define (TUTTI_\w+) (\d+)$", f.read(), re.M))


def _nccl_header_version():
    """NCCL_VERSION(MAJOR, MINOR, PATCH) from nccl.h, as NCCL defines it."""
    for path in NCCL_HEADERS:
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            major, minor, patch = (int(re.search(r"#define NCCL_%s (\d+)" % part, text).group(1))
                                   for part in ("MAJOR", "MINOR", "PATCH"))
            if (major, minor) >= (2, 9):
                return major * 10000 + minor * 100 + patch
            return major * 1000 + minor * 100 + patch
    pytest.fail("NCCL is built in but no nccl.h in %s" % NCCL_HEADERS)


def _expected_backend():
    backend = os.environ.get("TUTTI_BACKEND", "auto")
    if backend == "auto":
        return "mpi" if "OMPI_COMM_WORLD_SIZE" in os.environ else "tcp"
    return backend


def test_built_queries_match_the_build_configuration():
    config = _config()
    assert hvd.mpi_built() is (config["TUTTI_BUILT_MPI"] == "1")
    assert hvd.cuda_built() is (config["TUTTI_BUILT_CUDA"] == "1")
    assert hvd.gloo_built() is True  # the tcp backend, always built
    assert hvd.rocm_built() is False
    assert hvd.ccl_built() is False
    assert hvd.ddl_built() is False


def test_nccl_built_is_the_nccl_version_code_or_zero():
    version = hvd.nccl_built()
    assert type(version) is int
    if _config()["TUTTI_BUILT_NCCL"] == "1":
        assert version == _nccl_header_version()
        assert version > 0
    else:
        assert version == 0


def test_enabled_queries_follow_the_backend_in_use():
    backend = _expected_backend()
    assert hvd.is_initialized() is True
    assert hvd.mpi_enabled() is (backend == "mpi")
    assert hvd.gloo_enabled() is (backend in ("tcp", "nccl"))
    if backend != "mpi":
        with pytest.raises(ValueError, match="MPI is not enabled"):
            hvd.mpi_threads_supported()
    else:
        # tutti initialises MPI with MPI_THREAD_MULTIPLE itself.
        assert hvd.mpi_threads_supported() is True


def test_is_homogeneous_on_one_host():
    # run_job_tests.py runs every rank on this host: one host of size() ranks.
    assert hvd.cross_size() == 1 and hvd.local_size() == hvd.size()
    assert hvd.is_homogeneous() is True


def test_queries_are_exported_like_horovods():
    for name in ("mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built",
                 "cuda_built", "rocm_built", "ccl_built", "ddl_built", "is_initialized",
                 "mpi_threads_supported", "is_homogeneous", "start_timeline", "stop_timeline"):
        assert getattr(hvd, name) is getattr(tutti, name), name
        assert callable(getattr(hvd, name))

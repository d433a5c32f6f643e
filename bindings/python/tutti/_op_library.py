"""Finding a framework's op library: what tutti.tensorflow._loader and
tutti.jax._loader share.

A framework op library (libtutti_tensorflow.so, libtutti_jax.so) is compiled
against one version of its framework; CMake builds it when it knows a Python
with that framework (cmake/framework_python.cmake) and writes a stamp file
beside it naming the version (libtutti_<fw>.<fw>-version). Searched in this
order: $TUTTI_<FW>_LIBRARY (a file), the framework package's own directory
(a wheel: tutti/<fw>/), the directory of the loaded libtutti.so plus
../<fw> (a build tree: build/bindings/c -> build/bindings/<fw>),
<repo>/build/bindings/<fw>. A library whose stamp names another version is
refused (ImportError naming both), as Horovod refuses a framework version it
was not built for. Imports no framework; thread-safety: pure functions.
"""

import os
from typing import List, NamedTuple

from tutti import _library


class OpLibrary(NamedTuple):
    """One framework's op library. package: the binding ("tensorflow", "jax",
    also the folder in the wheel and the build tree); framework: its name in
    messages ("TensorFlow", "jaxlib"); version, module_file: the running
    framework's version and where it was imported from; stamp_suffix: the
    stamp's extension (".tf-version"); install_flag: scripts/install-deps'
    option; cmake_python: the CMake variable naming the Python; target: the
    CMake target."""

    package: str
    library_name: str
    env_var: str
    framework: str
    version: str
    module_file: str
    stamp_suffix: str
    install_flag: str
    cmake_python: str
    target: str


def candidate_paths(lib: OpLibrary, package_dir: str) -> List[str]:
    """The paths tried, in order (missing ones are skipped). package_dir: the
    folder of the binding's package (tutti/<package>)."""
    paths = []
    env = os.environ.get(lib.env_var)
    if env:
        paths.append(env)
    paths.append(os.path.join(package_dir, lib.library_name))
    lib_name = getattr(_library.load(), "_name", None)
    if lib_name and os.path.sep in lib_name:
        c_dir = os.path.dirname(os.path.realpath(lib_name))
        paths.append(os.path.join(os.path.dirname(c_dir), lib.package, lib.library_name))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(package_dir))))
    paths.append(os.path.join(repo, "build", "bindings", lib.package, lib.library_name))
    return paths


def check_version(lib: OpLibrary, path: str) -> None:
    """ImportError when the stamp beside `path` names another framework
    version than the running one (no stamp: accepted)."""
    stamp = os.path.splitext(path)[0] + lib.stamp_suffix
    if not os.path.exists(stamp):
        return
    with open(stamp) as f:
        built = f.read().strip()
    if built and built != lib.version:
        raise ImportError(
            "%s was built against %s %s but this process runs %s %s (%s): rebuild it "
            "(scripts/build, with -D%s pointing at this Python, or pip install "
            "--no-build-isolation . in this environment)"
            % (path, lib.framework, built, lib.framework, lib.version, lib.module_file,
               lib.cmake_python))


def find(lib: OpLibrary, package_dir: str) -> str:
    """The first existing candidate, version-checked. libtutti is loaded
    first (tutti._library, honouring $TUTTI_LIBRARY), so that the op library,
    which links libtutti.so.0, resolves against the same copy as the rest of
    tutti. Raises ImportError naming every path tried and how to build it."""
    _library.load()
    tried = []
    for path in candidate_paths(lib, package_dir):
        if os.path.exists(path):
            check_version(lib, path)
            return path
        tried.append(path + " (missing)")
    if not os.environ.get(lib.env_var):
        tried.insert(0, "$%s (unset)" % lib.env_var)
    raise ImportError(
        "tutti.%s needs its op library %s, built against this %s (%s, %s), and it was not "
        "found. Build it: scripts/install-deps %s then scripts/build, or configure CMake with "
        "-D%s=<this python> and build the target %s, or pip install --no-build-isolation . "
        "in this environment; or set %s to the built file. Tried: %s"
        % (lib.package, lib.library_name, lib.framework, lib.version, lib.module_file,
           lib.install_flag, lib.cmake_python, lib.target, lib.env_var, "; ".join(tried)))

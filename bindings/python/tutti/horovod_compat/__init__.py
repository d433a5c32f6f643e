"""Runs an unmodified Horovod PyTorch script on tutti (opt-in, per process).

    python3 -m tutti.horovod_compat train.py [args ...]
    python3 -m tutti.horovod_compat -m package.train [args ...]
    tuttirun -np 4 --horovod-compat python3 train.py [args ...]

The runner puts SHIM_DIR first on sys.path of this process only (never in
the environment, so child processes are not affected unless they are run the
same way) and runs the script as __main__. SHIM_DIR holds one package,
``horovod``, whose import installs AliasFinder: every module in MAPPED is the
tutti module itself (``import horovod.torch as hvd`` is tutti.torch,
``horovod.torch.mpi_ops`` is tutti.torch.mpi_ops, and so on), so there is one
copy of each module and its state.

Mapped (MAPPED): horovod.torch and every submodule under it (mpi_ops,
compression, functions, optimizer, sync_batch_norm, elastic, elastic.state,
elastic.sampler), horovod.common.exceptions (HorovodInternalError,
HostsUpdatedInterrupt, ...), horovod.common.elastic (State, ObjectState,
run_fn) and horovod.common.process_sets. Not mapped, an ImportError that
says so: horovod.runner (launch with tuttirun: -np, -H, --hostfile, --min-np,
--max-np, --host-discovery-script; its Python elastic driver API has no tutti
counterpart), horovod.tensorflow, horovod.keras, horovod.mxnet, horovod.ray,
horovod.spark and the other horovod.common modules.

A real Horovod is never shadowed unless asked: when ``import horovod`` would
find an installed Horovod, the runner exits with status 2 naming it, unless
--shadow-real-horovod is given (or TUTTI_HOROVOD_COMPAT_SHADOW=1 is set), in
which case the alias goes first for this process all the same.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")

# horovod module (or prefix, for the packages whose submodules all map) -> tutti module.
MAPPED = {
    "horovod.torch": "tutti.torch",
    "horovod.common": "tutti.common",
    "horovod.common.exceptions": "tutti.common.exceptions",
    "horovod.common.elastic": "tutti.elastic",
    "horovod.common.process_sets": "tutti.process_sets",
}
_PREFIXES = ("horovod.torch",)  # their submodules map name for name

_UNMAPPED_HINT = {
    "horovod.runner": "launch with tuttirun (-np, -H, --hostfile, --min-np, --max-np, "
                      "--host-discovery-script) instead of horovodrun or horovod.runner.run",
}


def target_of(name):
    """The tutti module that horovod module `name` is, or None when it is not
    mapped (`name` outside horovod.*, or a horovod module tutti lacks)."""
    if name in MAPPED:
        return MAPPED[name]
    for prefix in _PREFIXES:
        if name.startswith(prefix + "."):
            return MAPPED[prefix] + name[len(prefix):]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Loads a horovod module as the already-imported tutti module itself."""

    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass  # the tutti module ran when it was imported


class AliasFinder(importlib.abc.MetaPathFinder):
    """sys.meta_path finder for horovod.* (see the module docstring)."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("horovod."):
            return None
        tutti_name = target_of(name)
        if tutti_name is None:
            top = ".".join(name.split(".")[:2])
            hint = _UNMAPPED_HINT.get(top, "tutti.horovod_compat maps %s" % ", ".join(
                sorted(MAPPED)) + " (and the submodules of horovod.torch)")
            raise ModuleNotFoundError("No module named %r: tutti's Horovod alias does not map "
                                      "it; %s" % (name, hint), name=name)
        if importlib.util.find_spec(tutti_name) is None:
            return None  # e.g. horovod.torch.nonexistent: the usual ModuleNotFoundError
        spec = importlib.machinery.ModuleSpec(name, _AliasLoader(tutti_name))
        tutti_module = importlib.import_module(tutti_name)
        if hasattr(tutti_module, "__path__"):
            spec.submodule_search_locations = list(tutti_module.__path__)
        return spec


def install_finder():
    """Puts AliasFinder first on sys.meta_path (once). Called by the alias
    package's __init__; harmless to call again."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())


def real_horovod():
    """The location of an installed Horovod that `import horovod` would find
    (not the alias), or None."""
    saved = sys.path
    try:
        sys.path = [p for p in sys.path if os.path.abspath(p or ".") != SHIM_DIR]
        spec = importlib.util.find_spec("horovod") if "horovod" not in sys.modules else \
            getattr(sys.modules["horovod"], "__spec__", None)
    finally:
        sys.path = saved
    if spec is None or (spec.origin or "").startswith(SHIM_DIR):
        return None
    return spec.origin or (list(spec.submodule_search_locations or []) or [None])[0]


def enable(shadow_real_horovod=False):
    """Puts the alias first on this process's sys.path. Raises ImportError
    naming an installed Horovod when one is found and shadow_real_horovod is
    False. Returns the path of the alias directory."""
    real = real_horovod()
    if real is not None and not shadow_real_horovod:
        raise ImportError(
            "a real Horovod is installed (%s); tutti.horovod_compat does not shadow it unless "
            "asked: pass --shadow-real-horovod or set TUTTI_HOROVOD_COMPAT_SHADOW=1" % real)
    if SHIM_DIR not in sys.path:
        sys.path.insert(0, SHIM_DIR)
    sys.modules.pop("horovod", None)
    return SHIM_DIR

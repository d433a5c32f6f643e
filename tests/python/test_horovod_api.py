"""docs/horovod.md stays true: every public name of horovod.torch 0.28.1 (the
list in horovod_torch_api.txt) has a row there, and the row's status matches
tutti.torch.

- "same" / "differs": the name exists in tutti.torch; a callable accepts every
  parameter of Horovod's signature, in Horovod's order (tutti's own extra
  parameters come after them), and those optional in Horovod are optional.
- "not supported": tutti.torch does not define the name (a call fails with
  AttributeError at once instead of doing something else).
- every public name of each horovod.torch submodule (horovod_torch_modules.txt)
  imports from the same path under tutti.torch, as tutti.torch's object.

No collectives: the same checks on every rank.
"""

import ast
import importlib
import inspect
import os
import re

import pytest

import tutti.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STATUSES = ("same", "differs", "not supported")


def _horovod_names():
    """[(dotted name, [(param, has_default)] or None for non-callables)]."""
    out = []
    with open(os.path.join(HERE, "horovod_torch_api.txt")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "(" not in line:
                out.append((line, None))
                continue
            name, rest = line.split("(", 1)
            tree = ast.parse("def f(%s: pass" % rest)
            args = tree.body[0].args
            first_default = len(args.args) - len(args.defaults)
            params = [(a.arg, i >= first_default) for i, a in enumerate(args.args)]
            out.append((name, params))
    return out


def _doc_rows():
    """{name: status} from the tables of docs/horovod.md (rows `| `name` | status | ...`)."""
    rows = {}
    with open(os.path.join(REPO, "docs", "horovod.md")) as f:
        for line in f:
            m = re.match(r"\|\s*`([\w.]+)`\s*\|\s*([^|]+?)\s*\|", line)
            if m:
                rows[m.group(1)] = m.group(2)
    return rows


def _resolve(dotted):
    obj = hvd
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return None, False
        obj = getattr(obj, part)
    return obj, True


HOROVOD = _horovod_names()
ROWS = _doc_rows()


def test_the_list_is_complete_and_every_name_has_a_row():
    assert len(HOROVOD) >= 70, "horovod_torch_api.txt lost names: %d" % len(HOROVOD)
    missing = [name for name, _ in HOROVOD if name not in ROWS]
    assert not missing, "docs/horovod.md has no row for %s" % missing
    bad = {n: s for n, s in ROWS.items() if s not in STATUSES}
    assert not bad, "statuses must be one of %s: %s" % (STATUSES, bad)


@pytest.mark.parametrize("name,params", HOROVOD, ids=[n for n, _ in HOROVOD])
def test_status_matches_tutti(name, params):
    status = ROWS.get(name)
    obj, present = _resolve(name)
    if status == "not supported":
        assert not present, "%s is documented as not supported but tutti.torch has it" % name
        return
    assert present, "%s is documented as %r but tutti.torch lacks it" % (name, status)
    if params is None:
        return
    sig = inspect.signature(obj)
    ours = list(sig.parameters)
    names = [p for p, _ in params]
    absent = [p for p in names if p not in sig.parameters]
    assert not absent, "%s: Horovod's parameters %s are not accepted" % (name, absent)
    assert ours[:len(names)] == names, (
        "%s: parameters %s, Horovod's %s (tutti's own extras go last, so that "
        "positional calls mean the same)" % (name, ours, names))
    for p, optional in params:
        if optional:
            assert sig.parameters[p].default is not inspect.Parameter.empty, (
                "%s: %s is optional in Horovod but required here" % (name, p))


def _module_names():
    """[(module, name)] from horovod_torch_modules.txt."""
    out = []
    with open(os.path.join(HERE, "horovod_torch_modules.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                module, names = line.split(":", 1)
                out.extend((module.strip(), n) for n in names.split())
    return out


MODULE_NAMES = _module_names()


def test_the_module_list_covers_horovods_submodules():
    modules = {m for m, _ in MODULE_NAMES}
    assert modules == {"mpi_ops", "compression", "functions", "optimizer", "sync_batch_norm",
                       "elastic", "elastic.sampler", "elastic.state"}
    assert len(MODULE_NAMES) == 133, len(MODULE_NAMES)  # the v0.28.1 count


@pytest.mark.parametrize("module,name", MODULE_NAMES,
                         ids=["%s.%s" % mn for mn in MODULE_NAMES])
def test_every_submodule_name_imports_from_horovods_path(module, name):
    """`from horovod.torch.<module> import <name>` works as
    `from tutti.torch.<module> import <name>`."""
    mod = importlib.import_module("tutti.torch." + module)
    assert hasattr(mod, name), "tutti.torch.%s has no %s" % (module, name)
    obj = getattr(mod, name)
    top = getattr(hvd, name, None)
    if top is not None and name != "init":  # the same object as tutti.torch's
        assert obj is top, "tutti.torch.%s.%s is not tutti.torch.%s" % (module, name, name)


def test_mpi_ops_helpers_behave_as_horovods():
    from tutti.torch import mpi_ops

    assert [n for n in range(20) if mpi_ops.num_rank_is_power_2(n)] == [1, 2, 4, 8, 16]
    impl = mpi_ops.handle_average_backwards_compatibility
    assert impl(None, None) == hvd.Average and impl(hvd.Sum, None) == hvd.Sum
    with pytest.raises(ValueError, match="The op parameter supersedes average"):
        impl(hvd.Sum, True)
    with pytest.warns(DeprecationWarning,
                      match="Parameter `average` has been replaced with `op`"):
        assert impl(None, False) == hvd.Sum
    assert mpi_ops.gpu_available("torch") is (bool(hvd.cuda_built()) and
                                              __import__("torch").cuda.is_available())
    from tutti.torch.optimizer import split_list
    assert split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert issubclass(mpi_ops.HorovodAllreduce, __import__("torch").autograd.Function)

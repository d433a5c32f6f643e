"""docs/horovod.md stays true: every public name of horovod.torch 0.28.1 (the
list in horovod_torch_api.txt) has a row there, and the row's status matches
tutti.torch.

- "same" / "differs": the name exists in tutti.torch; a callable accepts every
  parameter of Horovod's signature, in Horovod's order (tutti's own extra
  parameters come after them), and those optional in Horovod are optional.
- "not supported": tutti.torch does not define the name (a call fails with
  AttributeError at once instead of doing something else).

No collectives: the same checks on every rank.
"""

import ast
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

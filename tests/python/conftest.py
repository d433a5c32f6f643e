"""pytest setup for the Python API tests.

Run every rank of a job through pytest, e.g.
    tuttirun -np 3 /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
Every rank runs the same tests in the same order (they issue collectives), so
no test may be skipped or selected on some ranks only. Without tuttirun the
tests run as a job of one rank.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import tutti.torch as hvd  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def tutti_job():
    hvd.init()
    yield
    hvd.shutdown()


def pytest_collection_modifyitems(items):
    # The same order on every rank, whatever the file system says; the
    # lifecycle tests (shutdown and init again) last.
    items.sort(key=lambda item: ("lifecycle" in item.nodeid, item.nodeid))

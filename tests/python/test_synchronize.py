"""synchronize() and poll() at the wait-slice boundary (tutti.torch._handles).

synchronize() waits in slices of _handles.WAIT_SLICE_SECONDS; with a slice of
1e-6 s nearly every slice expires, so ops that complete between an expired
slice and the next tutti_poll are the common case: each must come back with
its real status (its values, or its own error), never the slice's timeout.
"""

import time

import pytest
import torch

import tutti.torch as hvd
from tutti.torch import _handles


@pytest.fixture
def tiny_slice(monkeypatch):
    monkeypatch.setattr(_handles, "WAIT_SLICE_SECONDS", 1e-6)


def test_ops_finishing_at_the_slice_boundary_return_their_values(tiny_slice):
    r, s = hvd.rank(), hvd.size()
    for i in range(400):
        if r == 0 and i % 4 == 0:
            time.sleep(0.0003)  # rank 0 a little late: the op finishes while others wait
        h = hvd.allreduce_async(torch.full((5,), float(r + i)), name="slice.%d" % i, op=hvd.Sum)
        out = hvd.synchronize(h)
        # sum over ranks q of (q + i)
        assert torch.equal(out, torch.full((5,), float(s * i + s * (s - 1) // 2))), i


def test_in_place_int_ops_at_the_slice_boundary(tiny_slice):
    r, s = hvd.rank(), hvd.size()
    handles, tensors = [], []
    for i in range(100):
        t = torch.full((3,), r * 10 + i, dtype=torch.int64)
        handles.append(hvd.allreduce_async_(t, name="slice.inplace.%d" % i, op=hvd.Sum))
        tensors.append(t)
    for i, (h, t) in enumerate(zip(handles, tensors)):
        assert hvd.synchronize(h) is t
        assert t.tolist() == [10 * s * (s - 1) // 2 + s * i] * 3, i


def test_a_failed_op_at_the_slice_boundary_raises_its_own_error(tiny_slice):
    r, s = hvd.rank(), hvd.size()
    for i in range(20):
        # Shapes differ across ranks when s > 1: MismatchError on every rank.
        h = hvd.allreduce_async(torch.zeros(3 + (r if s > 1 else 0)), name="slice.bad.%d" % i)
        if s > 1:
            with pytest.raises(hvd.MismatchError) as info:
                hvd.synchronize(h)
            assert "shapes differ" in str(info.value)
        else:
            assert torch.equal(hvd.synchronize(h), torch.zeros(3))


def test_poll_turns_true_and_synchronize_then_returns(tiny_slice):
    r, s = hvd.rank(), hvd.size()
    h = hvd.allreduce_async(torch.ones(2), name="slice.poll", op=hvd.Sum)
    deadline = time.monotonic() + 30
    while not hvd.poll(h):
        assert time.monotonic() < deadline
    assert hvd.poll(h)  # stays true until synchronized
    assert torch.equal(hvd.synchronize(h), torch.full((2,), float(s)))
    with pytest.raises(hvd.InvalidArgumentError):
        hvd.poll(h)  # released by synchronize

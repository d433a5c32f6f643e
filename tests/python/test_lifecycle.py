"""init -> shutdown -> init in one process, and what shutdown does to pending
ops (docs/cases.md 23). Sorted last by conftest.py."""

import pytest
import torch

import tutti.torch as hvd


def test_pending_handles_fail_with_shutdown_error_and_init_works_again():
    r, s = hvd.rank(), hvd.size()
    # A name no other rank submits: it stays pending until shutdown (a peer's
    # shutdown may end it earlier, hence the barrier before looking).
    pending = hvd.allreduce_async(torch.ones(2), name="never.%d" % r)
    if s > 1:
        assert not hvd.poll(pending)
    hvd.barrier()
    hvd.shutdown()
    assert not hvd.is_initialized()
    if s > 1:
        with pytest.raises(hvd.ShutdownError):
            hvd.synchronize(pending)
    with pytest.raises(hvd.NotInitializedError):
        hvd.rank()
    with pytest.raises(hvd.NotInitializedError):
        hvd.allreduce(torch.ones(1))
    hvd.init()
    assert hvd.is_initialized() and hvd.size() == s and hvd.rank() == r
    assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after.reinit"),
                       torch.full((3,), float(s)))

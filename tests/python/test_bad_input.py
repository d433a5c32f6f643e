"""One rank's bad arguments are an error on every rank, and the job goes on
(issue 18, item 1): rank 0 turns the bad request into an error for that tensor
on every rank, naming the rank, what was wrong and what is accepted.

Every rank runs the same tests: the rank-dependent part is inside the body.
"""

import pytest
import torch

import tutti.torch as hvd


def test_alltoall_bad_splits_on_rank_1_only_fail_every_rank():
    r, s = hvd.rank(), hvd.size()
    bad = 1 if s > 1 else 0
    t = torch.full((s, 2), float(r))
    # rank `bad` passes one split too many; the others a valid even split.
    splits = [1] * (s + 1) if r == bad else [1] * s
    with pytest.raises(hvd.InvalidArgumentError) as info:
        hvd.alltoall(t, splits=splits, name="bad_input.a2a")
    message = str(info.value)
    assert ("alltoall 'bad_input.a2a': rank %d: splits has %d entries; expected one per rank (%d)"
            % (bad, s + 1, s)) in message, message
    # The next collectives work on every rank.
    out, received = hvd.alltoall(t, splits=[1] * s, name="bad_input.a2a.fixed")
    assert torch.equal(received, torch.ones(s, dtype=torch.int32))
    assert torch.equal(out, torch.arange(s, dtype=torch.float32).repeat_interleave(2).reshape(s, 2))
    assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="bad_input.after"),
                       torch.full((3,), float(s)))

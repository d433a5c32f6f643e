"""sparse_allreduce_async / sparse_allreduce (Horovod's allgather of indices
and values) and DistributedOptimizer with sparse gradients (an
nn.Embedding(sparse=True) under torch.optim.SparseAdam), against hand-made
sums and single-process training on the whole global batch."""

import copy

import pytest
import torch
import torch.nn as nn

import tutti.torch as hvd

ROWS = 3  # embedding lookups per rank and step
VOCAB, DIM = 12, 4


def my_sparse(r, n_rows):
    """Rank r's sparse [n_rows, 3] tensor: rows r and r + 1 (rank 0: none)."""
    if r == 0:
        return torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.int64), torch.zeros(0, 3),
                                       (n_rows, 3))
    values = torch.tensor([[1.0, 2.0, 3.0], [10.0 * r, 0.5, -1.0]])
    return torch.sparse_coo_tensor(torch.tensor([[r, r + 1]]), values, (n_rows, 3))


def test_sparse_allreduce_average_and_sum():
    r, s = hvd.rank(), hvd.size()
    n_rows = s + 1
    total = sum(my_sparse(q, n_rows).to_dense() for q in range(s))  # by hand, rank by rank
    h = hvd.sparse_allreduce_async(my_sparse(r, n_rows), "sparse.avg", hvd.Average)
    hvd.poll(h)  # accepted as any handle (an unknown one raises)
    avg = hvd.synchronize(h)
    assert avg.is_sparse and avg.size() == (n_rows, 3)
    assert avg._nnz() == 2 * (s - 1)  # uncoalesced: one entry per rank and row, as Horovod's
    assert torch.allclose(avg.to_dense(), total / s)
    summed = hvd.sparse_allreduce_async(my_sparse(r, n_rows), "sparse.sum", hvd.Sum)()
    assert torch.equal(summed.to_dense(), total)
    blocking = hvd.sparse_allreduce(my_sparse(r, n_rows), name="sparse.blocking", op=hvd.Sum)
    assert torch.equal(blocking.coalesce().to_dense(), total)


def test_sparse_allreduce_bad_arguments():
    with pytest.raises(hvd.InvalidArgumentError, match="sparse COO"):
        hvd.sparse_allreduce_async(torch.ones(3), "sparse.dense", hvd.Sum)
    with pytest.raises(hvd.InvalidArgumentError, match="Average or Sum"):
        hvd.sparse_allreduce_async(my_sparse(1, 3), "sparse.max", hvd.Max)


def lookups(step, s):
    g = torch.Generator().manual_seed(500 + step)
    idx = torch.randint(0, VOCAB, (ROWS * s, 2), generator=g)
    target = torch.randn(ROWS * s, DIM, generator=g)
    return idx, target


def loss_of(emb, idx, target):
    return ((emb(idx).sum(1) - target) ** 2).mean()


def reference(emb, steps, s):
    emb = copy.deepcopy(emb)
    opt = torch.optim.SparseAdam(emb.parameters(), lr=0.05)
    for step in range(steps):
        idx, target = lookups(step, s)
        opt.zero_grad()
        loss_of(emb, idx, target).backward()
        opt.step()
    return emb.weight.detach()


@pytest.mark.parametrize("sparse_as_dense", [False, True])
@pytest.mark.parametrize("set_to_none", [False, True])
def test_embedding_sparse_adam_matches_global_batch(sparse_as_dense, set_to_none):
    r, s = hvd.rank(), hvd.size()
    torch.manual_seed(40)
    emb = nn.Embedding(VOCAB, DIM, sparse=True)
    expected = reference(emb, 3, s)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters(), lr=0.05),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    for step in range(3):
        idx, target = lookups(step, s)
        mine = slice(ROWS * r, ROWS * (r + 1))
        opt.zero_grad(set_to_none=set_to_none)
        loss_of(emb, idx[mine], target[mine]).backward()
        opt.step()
        assert emb.weight.grad.is_sparse  # what SparseAdam needs, both ways
    assert torch.allclose(emb.weight.detach(), expected, rtol=1e-5, atol=1e-6)
    everyone = hvd.allgather(emb.weight.detach().unsqueeze(0), name="sparse.check")
    assert torch.equal(everyone.min(0).values, everyone.max(0).values)


def test_rank_without_the_gradient_takes_part_empty():
    """Step 1: rank 0 runs no backward (its gradient is None after
    zero_grad(set_to_none=True)); it sends an empty sparse gradient, and the
    average is the others' sum over size(), as a global loss without rank 0's
    rows."""
    r, s = hvd.rank(), hvd.size()
    torch.manual_seed(41)
    emb = nn.Embedding(VOCAB, DIM, sparse=True)
    ref = copy.deepcopy(emb)
    ref_opt = torch.optim.SparseAdam(ref.parameters(), lr=0.05)
    for step in range(2):
        idx, target = lookups(step, s)
        ref_opt.zero_grad()
        first = 0 if step == 0 else 1
        rows = slice(ROWS * first, ROWS * s)
        if s > first:  # (alone, nothing in step 1: no gradient, no update)
            (loss_of(ref, idx[rows], target[rows]) * (s - first) / s).backward()
        ref_opt.step()
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters(), lr=0.05),
                                   named_parameters=emb.named_parameters())
    for step in range(2):
        idx, target = lookups(step, s)
        opt.zero_grad(set_to_none=True)
        if step == 0 or r != 0:
            mine = slice(ROWS * r, ROWS * (r + 1))
            loss_of(emb, idx[mine], target[mine]).backward()
        opt.step()
    assert torch.allclose(emb.weight.detach(), ref.weight.detach(), rtol=1e-5, atol=1e-6)

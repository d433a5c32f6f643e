"""Allreduce of sparse COO tensors (Horovod's sparse_allreduce_async).

As Horovod does it (horovod/torch/mpi_ops.py 0.28.1): the indices (as
[nnz, sparse_dim] rows) and the values of every rank are allgathered, and the
result is the uncoalesced sparse tensor of all of them, values divided by
size() for Average (with process_set=: the set's members and size). An index
present on several ranks appears once per rank (coalesce() sums them). The
result has the input's size, dtype and device.

The handle is an int that poll() and synchronize() accept like any other
(synchronize returns the sparse result) and, as Horovod's, a callable:
handle() returns the result too.
"""

from typing import List, Optional

import torch

from tutti import process_sets
from tutti.errors import InvalidArgumentError
from tutti.torch._core import (
    Average,
    Sum,
    check_tensor,
    enqueue_allgather,
    op_code,
    output_tensor,
    process_set_id,
)
from tutti.torch._handles import register, synchronize


class SparseHandle(int):
    """The handle of a sparse allreduce: calling it synchronizes (Horovod's handle())."""

    def __call__(self) -> torch.Tensor:
        return synchronize(self)


def _member(name: Optional[str], part: str) -> Optional[str]:
    return None if name is None else "%s.%s" % (name, part)


def _averaged(values: torch.Tensor, n: int) -> torch.Tensor:
    if values.dtype.is_floating_point or values.dtype.is_complex:
        return values / n
    return torch.div(values, n, rounding_mode="trunc")  # as an integer Average


def sparse_allreduce_async(tensor: torch.Tensor, name: Optional[str] = None,
                           op: Optional[int] = None,
                           process_set: Optional[object] = None) -> SparseHandle:
    """Starts the allreduce of a sparse COO tensor (e.g. the gradient of an
    nn.Embedding(sparse=True)): the allgather of every rank's indices and
    values, named "<name>.indices" and "<name>.values" (name None: generated).
    op: Average (default) or Sum. Returns a SparseHandle; synchronize(handle)
    or handle() gives the sparse result. Every rank's tensor must have the
    same size and dtype (else MismatchError); nnz may differ, 0 included."""
    ps_id = process_set_id(process_set)
    if not torch.is_tensor(tensor) or not tensor.is_sparse:
        raise InvalidArgumentError(
            "sparse_allreduce_async needs a sparse COO tensor, got %s"
            % (tensor.layout if torch.is_tensor(tensor) else type(tensor).__name__), 1)
    op = op_code(op)
    if op not in (Sum, Average):
        raise InvalidArgumentError("sparse_allreduce_async: op must be Average or Sum", 1)
    indices = tensor._indices().t().contiguous()
    values = tensor._values().contiguous()
    check_tensor(values, "the values of the sparse tensor")
    hs = [enqueue_allgather(indices, _member(name, "indices"), ps_id),
          enqueue_allgather(values, _member(name, "values"), ps_id)]
    shape, n = tensor.size(), process_sets.set_size(process_set)

    def finish(hs: List[int]) -> torch.Tensor:
        gathered = output_tensor(hs[1], values.device)
        if op == Average:
            gathered = _averaged(gathered, n)
        rows = output_tensor(hs[0], indices.device)
        return torch.sparse_coo_tensor(rows.t(), gathered, shape, dtype=values.dtype,
                                       device=values.device)

    return SparseHandle(register(hs, (indices, values), finish))


def sparse_allreduce(tensor: torch.Tensor, name: Optional[str] = None, op: Optional[int] = None,
                     process_set: Optional[object] = None) -> torch.Tensor:
    """Blocking sparse_allreduce_async: returns the sparse result."""
    return synchronize(sparse_allreduce_async(tensor, name, op, process_set))

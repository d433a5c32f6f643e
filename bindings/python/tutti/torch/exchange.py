"""Alltoall and reducescatter on PyTorch tensors, asynchronous forms: the
collectives where each rank receives its own part of the data (Horovod's
alltoall_async, reducescatter_async), on tutti.torch._core.

Re-exported, with their blocking forms alltoall and reducescatter, by
tutti.torch.ops and tutti.torch, which is how they are meant to be imported.
Tensors, names, process sets, errors and thread-safety: as the module
docstring of tutti.torch.ops says for every op.
"""

import ctypes
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch

from tutti import _library
from tutti.errors import InvalidArgumentError
from tutti.torch import _core
from tutti.torch._core import (
    check_tensor,
    contiguous,
    enqueue_alltoall,
    enqueue_reducescatter,
    op_code,
    output_tensor,
    process_set_id,
)
from tutti.torch._handles import register


def _checked_splits(splits: Any) -> Optional[List[int]]:
    """alltoall's splits as a list of ints (None stays None); InvalidArgumentError
    for a float, complex or bool tensor or a value that is not an integer."""
    if splits is None:
        return None
    if torch.is_tensor(splits) and (splits.dtype.is_floating_point or splits.dtype.is_complex
                                    or splits.dtype == torch.bool):
        # As Horovod: the splits tensor's dtype is checked, not its values.
        raise InvalidArgumentError(
            "alltoall splits is a %s tensor; expected an integer tensor (torch.int32 as "
            "Horovod, or int64) or a list of ints" % splits.dtype, 1)
    values = splits.tolist() if torch.is_tensor(splits) else list(splits)
    for v in values:
        if isinstance(v, bool) or int(v) != v:
            raise InvalidArgumentError(
                "alltoall splits must be integers (rows per rank), got %r" % (values,), 1)
    return [int(v) for v in values]


def alltoall_async(tensor: torch.Tensor, splits: Union[None, torch.Tensor, Sequence[int]] = None,
                   name: Optional[str] = None, process_set: Optional[object] = None) -> int:
    """Starts an alltoall: splits[p] consecutive rows of `tensor` go to rank p.

    splits: None (dim 0 divided evenly; must divide by size()) or a list/1-D
    tensor of size() non-negative ints summing to at most tensor.shape[0].
    synchronize() returns (output, received_splits) where output is the rows
    received, concatenated in rank order, and received_splits an int32 tensor."""
    ps_id = process_set_id(process_set)
    check_tensor(tensor)
    inp = contiguous(tensor)
    h = enqueue_alltoall(inp, _checked_splits(splits), name, ps_id)

    def finish(hs: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
        out = output_tensor(hs[0], inp.device)
        count = ctypes.c_int()
        lib = _core.lib()
        _library.check(lib.tutti_handle_received_splits(hs[0], None, 0, ctypes.byref(count)))
        buf = (ctypes.c_int64 * max(count.value, 1))()
        _library.check(lib.tutti_handle_received_splits(hs[0], buf, count.value, None))
        return out, torch.tensor(list(buf)[:count.value], dtype=torch.int32)

    return register([h], (inp,), finish)


def reducescatter_async(tensor: torch.Tensor, name: Optional[str] = None,
                        op: Optional[int] = None, process_set: Optional[object] = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts a reducescatter: the input (same shape on every rank) is reduced
    (op: Average default, Sum, Min, Max, Product) and rank r receives rows
    [offset_r, offset_r + rows_r), rows_r = d0 // size plus one for the first
    d0 % size ranks. synchronize() returns the new tensor."""
    ps_id = process_set_id(process_set)
    check_tensor(tensor)
    op = op_code(op)
    inp = contiguous(tensor)
    h = enqueue_reducescatter(inp, name, op, prescale_factor, postscale_factor, ps_id)
    return register([h], (inp,), lambda hs: output_tensor(hs[0], inp.device))

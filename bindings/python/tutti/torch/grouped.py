"""Grouped allgather and reducescatter, asynchronous forms (Horovod's
grouped_allgather_async and grouped_reducescatter_async), on
tutti.torch._core: one op per tensor, all enqueued before any is waited for,
one handle for the group. Shapes, dtypes, names, errors: as
tutti.torch.ops.allgather_async / reducescatter_async, per tensor. The
blocking forms are in tutti.torch.ops.
"""

from typing import List, Optional, Sequence

import torch

from tutti.errors import InvalidArgumentError
from tutti.torch._core import (
    check_tensor,
    contiguous,
    enqueue_allgather,
    enqueue_reducescatter,
    op_code,
    output_tensor,
    process_set_id,
)
from tutti.torch._handles import register


def _group_inputs(tensors: Sequence[torch.Tensor], what: str) -> List[torch.Tensor]:
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgumentError("%s needs at least one tensor" % what, 1)
    for i, t in enumerate(tensors):
        check_tensor(t, "tensors[%d]" % i)
    return [contiguous(t) for t in tensors]


def _member_name(name: Optional[str], i: int) -> Optional[str]:
    return None if name is None else "%s.%d" % (name, i)


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                            process_set: Optional[object] = None) -> int:
    """Starts an allgather of each tensor of a list (Horovod's
    grouped_allgather_async): each as allgather_async (first dimensions may
    differ per rank; shapes and dtypes may differ between the tensors), all
    enqueued before any is waited for; tensor i is named "<name>.<i>" (name
    None: generated). synchronize() returns the list of outputs, in order.
    Every tensor is checked before any is enqueued; an enqueue error of
    tensor i (e.g. DuplicateNameError) raises with tensors 0..i-1 in flight."""
    ps_id = process_set_id(process_set)
    inputs = _group_inputs(tensors, "grouped_allgather")
    hs = [enqueue_allgather(t, _member_name(name, i), ps_id) for i, t in enumerate(inputs)]
    return register(hs, (inputs,),
                    lambda hs: [output_tensor(h, t.device) for h, t in zip(hs, inputs)])


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                                op: Optional[int] = None, process_set: Optional[object] = None,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Starts a reducescatter of each tensor of a list (Horovod's
    grouped_reducescatter_async), each as reducescatter_async with the same
    op and scale factors, all enqueued before any is waited for; tensor i is
    named "<name>.<i>" (name None: generated). synchronize() returns the list
    of this rank's outputs, in order. Every tensor is checked before any is
    enqueued; an enqueue error of tensor i raises with tensors 0..i-1 in
    flight."""
    ps_id = process_set_id(process_set)
    op = op_code(op)
    inputs = _group_inputs(tensors, "grouped_reducescatter")
    hs = [enqueue_reducescatter(t, _member_name(name, i), op, prescale_factor, postscale_factor,
                                ps_id)
          for i, t in enumerate(inputs)]
    return register(hs, (inputs,),
                    lambda hs: [output_tensor(h, t.device) for h, t in zip(hs, inputs)])

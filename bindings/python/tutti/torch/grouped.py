"""Grouped allgather and reducescatter (Horovod's grouped_allgather and
grouped_reducescatter, sync and _async): one op per tensor, all enqueued
before any is waited for, one handle for the group. Shapes, dtypes, names,
errors: as tutti.torch.ops.allgather_async / reducescatter_async, per tensor.
"""

from tutti.errors import InvalidArgumentError
from tutti.torch.exchange import _enqueue_reducescatter
from tutti.torch.ops import (
    _check_tensor,
    _contiguous,
    _enqueue_allgather,
    _op_code,
    _output_tensor,
    _process_set_id,
    _register,
)


def _group_inputs(tensors, what):
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgumentError("%s needs at least one tensor" % what, 1)
    for i, t in enumerate(tensors):
        _check_tensor(t, "tensors[%d]" % i)
    return [_contiguous(t) for t in tensors]


def _member_name(name, i):
    return None if name is None else "%s.%d" % (name, i)


def grouped_allgather_async(tensors, name=None, process_set=None):
    """Starts an allgather of each tensor of a list (Horovod's
    grouped_allgather_async): each as allgather_async (first dimensions may
    differ per rank; shapes and dtypes may differ between the tensors), all
    enqueued before any is waited for; tensor i is named "<name>.<i>" (name
    None: generated). synchronize() returns the list of outputs, in order.
    Every tensor is checked before any is enqueued; an enqueue error of
    tensor i (e.g. DuplicateNameError) raises with tensors 0..i-1 in flight."""
    ps_id = _process_set_id(process_set)
    inputs = _group_inputs(tensors, "grouped_allgather")
    hs = [_enqueue_allgather(t, _member_name(name, i), ps_id) for i, t in enumerate(inputs)]
    return _register(hs, (inputs,),
                     lambda hs: [_output_tensor(h, t.device) for h, t in zip(hs, inputs)])


def grouped_allgather(tensors, name=None, process_set=None):
    """Blocking grouped_allgather_async; returns the list of gathered tensors.
    Differentiable (tutti.torch.autograd: Horovod's gradients)."""
    from tutti.torch import autograd

    return autograd.allgather(tensors, True, name, process_set)


def grouped_reducescatter_async(tensors, name=None, op=None, process_set=None,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of each tensor of a list (Horovod's
    grouped_reducescatter_async), each as reducescatter_async with the same
    op and scale factors, all enqueued before any is waited for; tensor i is
    named "<name>.<i>" (name None: generated). synchronize() returns the list
    of this rank's outputs, in order. Every tensor is checked before any is
    enqueued; an enqueue error of tensor i raises with tensors 0..i-1 in
    flight."""
    ps_id = _process_set_id(process_set)
    op = _op_code(op)
    inputs = _group_inputs(tensors, "grouped_reducescatter")
    hs = [_enqueue_reducescatter(t, _member_name(name, i), op, prescale_factor, postscale_factor,
                                 ps_id)
          for i, t in enumerate(inputs)]
    return _register(hs, (inputs,),
                     lambda hs: [_output_tensor(h, t.device) for h, t in zip(hs, inputs)])


def grouped_reducescatter(tensors, name=None, compression=None, op=None, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Blocking grouped_reducescatter_async; returns the list of outputs.
    compression: as tutti.torch.reducescatter (a tutti.Compression member or
    None leaves it uncompressed; a Horovod-style Python compressor runs
    around each tensor). Differentiable (tutti.torch.autograd)."""
    from tutti.torch import autograd

    return autograd.reducescatter(tensors, True, name, compression, op=_op_code(op),
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)

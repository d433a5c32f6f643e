"""Alltoall and reducescatter on PyTorch tensors: the collectives where each
rank receives its own part of the data (Horovod's alltoall, alltoall_async,
reducescatter, reducescatter_async).

Re-exported by tutti.torch.ops and tutti.torch, which is how they are meant
to be imported. Tensors, names, process sets, errors and thread-safety: as
the module docstring of tutti.torch.ops says for every op.
"""

import ctypes

import torch

from tutti import _library
from tutti.errors import InvalidArgumentError
from tutti.torch.ops import (
    _check_tensor,
    _contiguous,
    _desc,
    _encode,
    _lib,
    _op_code,
    _options,
    _output_tensor,
    _process_set_id,
    _register,
)


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """Starts an alltoall: splits[p] consecutive rows of `tensor` go to rank p.

    splits: None (dim 0 divided evenly; must divide by size()) or a list/1-D
    tensor of size() non-negative ints summing to at most tensor.shape[0].
    synchronize() returns (output, received_splits) where output is the rows
    received, concatenated in rank order, and received_splits an int32 tensor."""
    ps_id = _process_set_id(process_set)
    _check_tensor(tensor)
    inp = _contiguous(tensor)
    if splits is None:
        c_splits, n = None, 0
    else:
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
        n = len(values)
        c_splits = (ctypes.c_int64 * n)(*[int(v) for v in values])
    handle = _library.c_handle()
    d = _desc(inp)
    _library.check(_library.function("tutti_alltoall_async_opts")(
        ctypes.byref(d), c_splits, n, _encode(name), _options(ps_id), ctypes.byref(handle)))

    def finish(hs):
        out = _output_tensor(hs[0], inp.device)
        count = ctypes.c_int()
        _library.check(_lib().tutti_handle_received_splits(hs[0], None, 0, ctypes.byref(count)))
        buf = (ctypes.c_int64 * max(count.value, 1))()
        _library.check(_lib().tutti_handle_received_splits(hs[0], buf, count.value, None))
        return out, torch.tensor(list(buf)[:count.value], dtype=torch.int32)

    return _register([handle.value], (inp,), finish)


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Blocking alltoall. Returns the output tensor, or (output, received_splits)
    when `splits` was given (Horovod's convention). Differentiable
    (tutti.torch.autograd)."""
    from tutti.torch import autograd

    out, received = autograd.alltoall(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


def reducescatter_async(tensor, name=None, op=None, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter: the input (same shape on every rank) is reduced
    (op: Average default, Sum, Min, Max, Product) and rank r receives rows
    [offset_r, offset_r + rows_r), rows_r = d0 // size plus one for the first
    d0 % size ranks. synchronize() returns the new tensor."""
    ps_id = _process_set_id(process_set)
    _check_tensor(tensor)
    op = _op_code(op)
    inp = _contiguous(tensor)
    h = _enqueue_reducescatter(inp, name, op, prescale_factor, postscale_factor, ps_id)
    return _register([h], (inp,), lambda hs: _output_tensor(hs[0], inp.device))


def _enqueue_reducescatter(inp, name, op, prescale_factor, postscale_factor, ps_id=0):
    handle = _library.c_handle()
    d = _desc(inp)
    _library.check(_library.function("tutti_reducescatter_async_opts")(
        ctypes.byref(d), _encode(name), op, float(prescale_factor), float(postscale_factor),
        _options(ps_id), ctypes.byref(handle)))
    return handle.value


def reducescatter(tensor, name=None, compression=None, op=None, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Blocking reducescatter; returns this rank's rows of the reduction.
    compression: tutti's C++ compressors apply to allreduce only, so a
    tutti.Compression member (or None) leaves reducescatter uncompressed; a
    Horovod-style Python compressor runs around it. Differentiable
    (tutti.torch.autograd)."""
    from tutti.torch import autograd

    return autograd.reducescatter([tensor], False, name, compression, op=_op_code(op),
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set)[0]

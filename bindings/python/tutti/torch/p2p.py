"""Tagged point-to-point messages between two ranks (pipeline parallelism).

send(tensor, dst, tag) on one rank and recv(tensor, src, tag) on the other
move the tensor's values from the sender to the receiver's tensor. The n-th
send from rank s to rank d with a tag meets the n-th recv on d from s with
that tag (posting order on each side; messages between a pair with one tag
never overtake each other, as in MPI); other tags and other pairs are
independent. There are no wildcards. Only the two ranks take part: the other
ranks of the process set call nothing.

``dst`` and ``src`` are global ranks (members of ``process_set``, not this
rank). The message is matched through rank 0's negotiation, then moves
directly between the two ranks over the job's transport (tcp sockets or
shared memory; MPI_Isend/MPI_Irecv under --mpi): libtutti's tutti_p2p.h and
docs/negotiation.md.

Tensors: any tutti dtype and shape; sender and receiver must agree on the
dtype and the number of elements (shapes may differ), else both raise
MismatchError naming the message ("p2p 0->1 tag 7 #3": sender, receiver,
tag, number), both dtypes and counts. A non-contiguous tensor is sent from a
contiguous copy / received into one that synchronize() copies back. CUDA
tensors (in a build with CUDA) travel through host memory: send_async copies
the tensor to the host before it returns; recv's synchronize() copies the
received values into the CUDA tensor (this path is not yet run on a GPU).

Errors: InvalidArgumentError (a ValueError) at once for a peer that is not
another member of the set, a tag outside [-2**31, 2**31), a bad tensor;
synchronize() raises MismatchError (above), PeerLostError (the peer died or
made no progress for TUTTI_TIMEOUT_SECONDS), StalledError (the peer never
posted the matching call within TUTTI_STALL_SHUTDOWN_TIME_SECONDS),
ShutdownError.

The async forms return a handle for tutti.torch.poll / tutti.torch.synchronize
(and tutti.torch.ops.c_handles_of). synchronize() of a send returns None, of
a recv the received tensor (the ``tensor`` passed in, filled).
"""

import ctypes
import operator
from typing import Any, List, Optional

import torch

from tutti import _library
from tutti.errors import InvalidArgumentError
from tutti.torch import _core, _handles

_INT32 = (-(2 ** 31), 2 ** 31)


def _check_int(value: Any, what: str) -> int:
    """value as an int in the 32-bit range (dst, src, tag)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise InvalidArgumentError("%s=%r: expected an int" % (what, value), 1) from None
    if not _INT32[0] <= value < _INT32[1]:
        raise InvalidArgumentError(
            "%s=%d is outside the 32-bit range [-2**31, 2**31)" % (what, value), 1)
    return value


def _enqueue(function: str, tensor: torch.Tensor, peer: int, tag: int,
             ps_id: int) -> int:
    handle = _library.c_handle()
    desc = _core.desc(tensor)
    _library.check(_library.function(function)(
        ctypes.byref(desc), peer, tag, _core.options(ps_id), ctypes.byref(handle)))
    return handle.value


def _host(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor to hand to libtutti: contiguous, in host memory."""
    if tensor.device.type != "cpu":
        return tensor.detach().to("cpu", memory_format=torch.contiguous_format)
    return _core.contiguous(tensor.detach())


def send_async(tensor: torch.Tensor, dst: int, tag: int = 0,
               process_set: Optional[object] = None) -> int:
    """Starts sending `tensor` to global rank `dst` with `tag`; returns a
    handle. Do not modify `tensor` before synchronize() (CPU tensors are
    read in place)."""
    ps_id = _core.process_set_id(process_set)
    dst = _check_int(dst, "dst")
    tag = _check_int(tag, "tag")
    _core.check_tensor(tensor)
    buf = _host(tensor)
    handle = _enqueue("tutti_send_async", buf, dst, tag, ps_id)
    return _handles.register([handle], (tensor, buf), lambda hs: None)


def recv_async(tensor: torch.Tensor, src: int, tag: int = 0,
               process_set: Optional[object] = None) -> int:
    """Starts receiving the message from global rank `src` with `tag` into
    `tensor`; returns a handle. synchronize() returns `tensor`, filled."""
    ps_id = _core.process_set_id(process_set)
    src = _check_int(src, "src")
    tag = _check_int(tag, "tag")
    _core.check_tensor(tensor)
    direct = tensor.device.type == "cpu" and tensor.is_contiguous()
    buf = tensor if direct else torch.empty(tensor.shape, dtype=tensor.dtype)
    handle = _enqueue("tutti_recv_async", buf, src, tag, ps_id)
    if direct:
        return _handles.register([handle], (tensor,), lambda hs: tensor)

    def finish(_hs: List[int]) -> torch.Tensor:
        with torch.no_grad():
            tensor.copy_(buf)
        return tensor

    return _handles.register([handle], (tensor, buf), finish)


def send(tensor: torch.Tensor, dst: int, tag: int = 0,
         process_set: Optional[object] = None) -> None:
    """Sends `tensor` to global rank `dst` and waits until this side is done
    (the receiver has taken the message). Returns None."""
    return _handles.synchronize(send_async(tensor, dst, tag, process_set))


def recv(tensor: torch.Tensor, src: int, tag: int = 0,
         process_set: Optional[object] = None) -> torch.Tensor:
    """Receives the message from global rank `src` with `tag` into `tensor`
    and returns `tensor`."""
    return _handles.synchronize(recv_async(tensor, src, tag, process_set))

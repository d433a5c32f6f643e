"""Point-to-point messages of backend "tutti": send, recv (and through them
torch's isend, irecv, batch_isend_irecv and pipeline schedules) as tutti's
tagged messages (tutti.torch.p2p).

torch passes the peer as a group rank; tutti takes global ranks, so the
group's process set maps it. The n-th send from rank s to rank d with tag t
meets the n-th recv on d from s with tag t (MPI's non-overtaking rule, as
gloo's). Sender and receiver must agree on the dtype and the element count
(else both raise tutti's MismatchError naming the message); float8 and other
dtypes tutti does not reduce travel as their bytes. A recv from any source
(torch's recv/irecv without src) is matched through counters in the group's
store (_anysource.py), which every send therefore updates. Each call returns
an OpCompletion (value: [tensor]); a recv from any source a PendingRecv.
"""

from tutti.torch import ops, p2p
from tutti.torch.distributed import _collectives as col
from tutti.torch.distributed._anysource import PendingRecv
from tutti.torch.distributed._completion import OpCompletion


def _start(group, tensors, what, enqueue):
    if group._error is not None:  # noqa: SLF001 (the group's own state)
        raise RuntimeError(group._error)  # noqa: SLF001
    tensor = col.one_tensor(tensors, what)
    handle = enqueue(col.movable(tensor))
    devices = [str(tensor.device)] if tensor.device.type == "cuda" else None
    return OpCompletion(ops.c_handles_of(handle), lambda: ops.synchronize(handle),
                        lambda result: [tensor], devices)


def send(group, tensors, dst, tag):
    """Sends tensors[0] to group rank dst with tag (counted for recvs from
    any source); an OpCompletion."""
    peer = group._global_rank(dst)  # noqa: SLF001
    completion = _start(group, tensors, "send", lambda t: p2p.send_async(
        t, peer, tag=tag, process_set=group._process_set))  # noqa: SLF001
    group._any_source.sent(dst, tag)  # noqa: SLF001
    return completion


def _post_recv(group, tensors, src, tag):
    peer = group._global_rank(src)  # noqa: SLF001
    return _start(group, tensors, "recv", lambda t: p2p.recv_async(
        t, peer, tag=tag, process_set=group._process_set))  # noqa: SLF001


def recv(group, tensors, src, tag):
    """Receives into tensors[0] from group rank src with tag; an OpCompletion."""
    completion = _post_recv(group, tensors, src, tag)
    group._any_source.taking(src, tag)  # noqa: SLF001
    return completion


def recv_anysource(group, tensors, tag) -> PendingRecv:
    """Receives into tensors[0] the next message with tag from whichever
    group rank sends one (_anysource.py); a PendingRecv (its source() is
    the sender's group rank)."""
    if group._error is not None:  # noqa: SLF001
        raise RuntimeError(group._error)  # noqa: SLF001
    col.one_tensor(tensors, "recv")
    return group._any_source.recv(tag, lambda src: _post_recv(group, tensors, src, tag))  # noqa: SLF001

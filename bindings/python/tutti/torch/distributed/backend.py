"""BackendTutti: backend "tutti" on torch 2.x, a Python subclass of the c10d
Backend (torch._C._distributed_c10d.Backend) whose collectives are tutti's
(_group_ops.py: names, futures, errors, dtypes).

torch 2.x wraps a registered backend in its own ProcessGroup: that group has
the name functional collectives, DTensor, DeviceMesh and FSDP2 resolve, and
it dispatches every collective (from Python and from C++) to this object per
device type ("cpu", and "cuda" when tutti is built with CUDA). A blocking
call raises the op's error; an asynchronous one returns a FutureWork (a
Python Work whose wait() raises it; torch 2.x keeps the Python object alive
while C++ holds it), which torch's Python callers get as it is
(_work.see_through_works).

torch renamed some Backend methods over 2.x; both names are served:
_allgather_base / all_gather_single, _reduce_scatter_base /
reduce_scatter_single, alltoall_base / all_to_all_single,
allgather_into_tensor_coalesced / all_gather_single_coalesced,
reduce_scatter_tensor_coalesced / reduce_scatter_single_coalesced.

Not supported: splitting (supports_splitting is False: torch then creates
subgroups with new_group, which registers their tutti process sets).
"""

import torch

from tutti.torch.distributed._group_ops import GroupOps
from tutti.torch.distributed._work import FutureWork, hand_over


class BackendTutti(GroupOps, torch._C._distributed_c10d.Backend):
    """The c10d Backend torch 2.x creates for backend "tutti". rank/size: this
    process's rank in the group and its size; process_set, group_id, error:
    as GroupOps._setup; store: the group's torch store (monitored_barrier)."""

    def __init__(self, rank, size, process_set, group_id, error=None, store=None):
        super().__init__(rank, size)
        self._setup(process_set, group_id, error, store)

    def _work(self, completion, opts=None, source=None):
        """A blocking call (opts.asyncOp False: dist.all_reduce(t) and the like)
        waits here and raises the op's error; torch gets a completed Work. An
        asynchronous one (async_op=True, isend/irecv, DDP's reducer, FSDP2,
        functional collectives) gets a FutureWork: its wait() raises the op's
        error and takes a timeout, get_future() is the op's future. torch's
        C++ holder of a Python Work forwards only wait() and get_future(), so
        the FutureWork is also handed to torch's Python callers directly
        (_work.hand_over, see_through_works): is_completed(), exception(),
        _source_rank() answer as gloo's."""
        if opts is not None and getattr(opts, "asyncOp", True) is False:
            completion.run_here()  # runs the op on this thread; raises its error
            return torch._C._distributed_c10d._create_work_from_future(completion.future())
        return hand_over(FutureWork(completion, source))

    # torch 2.x's names for the same collectives
    all_gather_single = GroupOps._allgather_base
    reduce_scatter_single = GroupOps._reduce_scatter_base
    all_to_all_single = GroupOps.alltoall_base
    all_gather_single_coalesced = GroupOps.allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = GroupOps.reduce_scatter_tensor_coalesced

    def gather_single(self, output, input, opts=None):  # noqa: A002 (torch's name)
        """gather into one tensor on the root: [size * input.numel()] rows in rank order."""
        outputs = list(output.chunk(self.size())) if self.rank() == opts.rootRank else []
        return self.gather([outputs], [input], opts)

    # Capabilities torch reads as properties. They must be defined here: torch's
    # trampoline reads them by attribute, and the inherited C++ property would
    # call back into the trampoline (endless recursion).
    supports_splitting = property(lambda self: False)  # subgroups via new_group
    supports_coalescing = property(lambda self: False)  # the *_coalesced methods serve it
    supports_shrinking = property(lambda self: False)
    supports_reconfigure = property(lambda self: False)
    supports_window = property(lambda self: False)
    _supports_time_estimate = property(lambda self: False)

    def abort(self):
        """torch's abort: nothing of tutti's is torn down here (tutti's job
        outlives a group); pending ops end by tutti's own deadlines."""

    def shutdown(self):
        """destroy_process_group: the group's ops are all completed by then."""

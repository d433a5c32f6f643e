"""ProcessGroupTutti: backend "tutti" on torch 1.x, a Python subclass of
torch.distributed.ProcessGroup whose collectives are tutti's (_group_ops.py:
names, futures, errors, dtypes).

torch's Python functions (dist.all_reduce, ...) call its methods directly,
and C++ callers (DistributedDataParallel's reducer: allreduce, allgather,
broadcast) reach them through torch's trampoline class. No compilation
against libtutti: the same code runs on any torch whose ProcessGroup can be
subclassed in Python (1.13 here). torch 2.x wraps a c10d Backend instead
(backend.py); _backend.py chooses.

Works. torch's Python functions get a FutureWork (wait() raises the op's
error); C++ callers get torch's own Work from _create_work_from_future
(DDP's reducer reads the future): a Python Work handed to C++ on 1.x can be
freed while C++ still holds it.
"""

import torch
import torch.distributed as dist

from tutti.torch.distributed._group_ops import GroupOps, called_from_python_api
from tutti.torch.distributed._work import FutureWork


class ProcessGroupTutti(GroupOps, dist.ProcessGroup):
    """The process group torch creates for backend "tutti" (see the module
    docstring). rank/size: this process's rank in the group and its size.
    process_set: the tutti process set of the group's ranks (None: every
    rank). group_id: a name the same on every rank of the group. error: when
    not None, the group cannot run collectives (e.g. a subgroup tutti cannot
    map) and every op raises it."""

    def __init__(self, rank, size, process_set, group_id, error=None, store=None):
        super().__init__(rank, size)
        self._setup(process_set, group_id, error, store)

    def _work(self, completion, opts=None, source=None):
        if called_from_python_api():
            return FutureWork(completion, source)
        return torch._C._distributed_c10d._create_work_from_future(completion.future())

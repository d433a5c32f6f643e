"""Horovod's ``horovod.torch.mpi_ops`` path: every public name of Horovod
0.28.1's horovod/torch/mpi_ops.py, so that ``from tutti.torch.mpi_ops import
synchronize, Sum, Average, Adasum, allreduce_async_, poll`` (or, through
tutti.horovod_compat, ``from horovod.torch.mpi_ops import ...``) works.

The collectives, queries and reduce ops are tutti.torch's own objects
(tutti.torch.ops, tutti.basics, tutti.process_sets). The autograd Functions
HorovodAllreduce ... HorovodGroupedReducescatter take Horovod's forward
arguments (``HorovodAllreduce.apply(tensor, average, name, op,
prescale_factor, postscale_factor, process_set)``) and run tutti's Functions
(tutti.torch.autograd: Horovod's gradients). Not provided: Horovod's
check_installed_version and check_extension (they check Horovod's compiled
extension against the installed framework; tutti has none).
"""

from typing import Any, Callable, Optional

import torch

from tutti.basics import (  # noqa: F401 (re-exported)
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from tutti.errors import HorovodInternalError  # noqa: F401
from tutti.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from tutti.torch import _core
from tutti.torch import autograd as _autograd
from tutti.torch._init import init  # noqa: F401 (Horovod's mpi_ops.init: tutti.torch.init)
from tutti.torch.compression import Compression  # noqa: F401
from tutti.torch.ops import (  # noqa: F401
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from tutti.torch.sparse import sparse_allreduce_async  # noqa: F401


def gpu_available(ext_base_name: Optional[str] = None, verbose: bool = False) -> bool:
    """True when this process can run CUDA tensors: libtutti was built with
    CUDA and torch sees a GPU (Horovod's asks its framework extension the
    same; ext_base_name and verbose are accepted and unused)."""
    return bool(cuda_built()) and torch.cuda.is_available()


def num_rank_is_power_2(num_rank: int) -> bool:
    """True when num_rank is 1, 2, 4, 8, ... (the sizes Adasum runs on)."""
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


def get_average_backwards_compatibility_fun(reduce_ops: Any = None
                                            ) -> Callable[[Optional[int], Optional[bool]], int]:
    """Horovod's helper: returns impl(op, average) -> the reduce op (op wins;
    both given is a ValueError; average alone warns DeprecationWarning and
    means Average or Sum; neither means Average). reduce_ops is accepted and
    unused (tutti's ops are fixed)."""
    return _core.op_code


handle_average_backwards_compatibility = get_average_backwards_compatibility_fun()


def _options(op, prescale_factor, postscale_factor, process_set):
    return {"op": op, "prescale_factor": prescale_factor, "postscale_factor": postscale_factor,
            "process_set": process_set}


_NO_GRAD = _autograd._OPTIONS  # leading entries of tutti's Functions' backward results


class HorovodAllreduce(torch.autograd.Function):
    """apply(tensor, average, name, op, prescale_factor, postscale_factor, process_set)."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        options = _options(_core.op_code(op, average), prescale_factor, postscale_factor,
                           process_set)
        return _autograd.AllreduceFunction.forward(ctx, False, name, options, tensor)[0]

    @staticmethod
    def backward(ctx, grad_output):
        grads = _autograd.AllreduceFunction.backward(ctx, grad_output)[_NO_GRAD:]
        return grads + (None,) * 6


class HorovodGroupedAllreduce(torch.autograd.Function):
    """apply(average, name, op, prescale_factor, postscale_factor, process_set, *tensors)."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        options = _options(_core.op_code(op, average), prescale_factor, postscale_factor,
                           process_set)
        return _autograd.AllreduceFunction.forward(ctx, True, name, options, *tensors)

    @staticmethod
    def backward(ctx, *grad_output):
        grads = _autograd.AllreduceFunction.backward(ctx, *grad_output)[_NO_GRAD:]
        return (None,) * 6 + grads


class HorovodAllgather(torch.autograd.Function):
    """apply(tensor, name, process_set)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        options = {"process_set": process_set}
        return _autograd.AllgatherFunction.forward(ctx, False, name, options, tensor)[0]

    @staticmethod
    def backward(ctx, grad_output):
        return _autograd.AllgatherFunction.backward(ctx, grad_output)[_NO_GRAD:] + (None, None)


class HorovodGroupedAllgather(torch.autograd.Function):
    """apply(name, process_set, *tensors)."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        options = {"process_set": process_set}
        return _autograd.AllgatherFunction.forward(ctx, True, name, options, *tensors)

    @staticmethod
    def backward(ctx, *grad_output):
        return (None, None) + _autograd.AllgatherFunction.backward(ctx, *grad_output)[_NO_GRAD:]


class HorovodBroadcast(torch.autograd.Function):
    """apply(tensor, root_rank, name, process_set)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        options = {"process_set": process_set}
        return _autograd.BroadcastFunction.forward(ctx, root_rank, name, options, tensor)

    @staticmethod
    def backward(ctx, grad_output):
        grads = _autograd.BroadcastFunction.backward(ctx, grad_output)[_NO_GRAD:]
        return grads + (None, None, None)


class HorovodAlltoall(torch.autograd.Function):
    """apply(tensor, splits, name, process_set) -> (output, received_splits)."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        options = {"process_set": process_set}
        return _autograd.AlltoallFunction.forward(ctx, splits, name, options, tensor)

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grads = _autograd.AlltoallFunction.backward(ctx, grad_output, None)[_NO_GRAD:]
        return grads + (None, None, None)


class HorovodReducescatter(torch.autograd.Function):
    """apply(tensor, name, op, process_set, prescale_factor, postscale_factor)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        options = _options(op, prescale_factor, postscale_factor, process_set)
        return _autograd.ReducescatterFunction.forward(ctx, False, name, options, tensor)[0]

    @staticmethod
    def backward(ctx, grad_output):
        grads = _autograd.ReducescatterFunction.backward(ctx, grad_output)[_NO_GRAD:]
        return grads + (None,) * 5


class HorovodGroupedReducescatter(torch.autograd.Function):
    """apply(name, op, process_set, prescale_factor, postscale_factor, *tensors)."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        options = _options(op, prescale_factor, postscale_factor, process_set)
        return _autograd.ReducescatterFunction.forward(ctx, True, name, options, *tensors)

    @staticmethod
    def backward(ctx, *grad_output):
        grads = _autograd.ReducescatterFunction.backward(ctx, *grad_output)[_NO_GRAD:]
        return (None,) * 5 + grads


# What `from tutti.torch.mpi_ops import *` gives, as Horovod's horovod/torch/
# __init__.py imports it from mpi_ops (tutti.torch does the same; its init()
# is its own).
__all__ = [
    "Adasum", "Average", "Compression", "HorovodInternalError", "Max", "Min", "Product",
    "ProcessSet", "Sum", "add_process_set", "allgather", "allgather_async", "allreduce",
    "allreduce_", "allreduce_async", "allreduce_async_", "alltoall", "alltoall_async", "barrier",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "ccl_built", "cross_rank",
    "cross_size", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "global_process_set",
    "grouped_allgather", "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter",
    "grouped_reducescatter_async", "is_homogeneous", "is_initialized", "join", "local_rank",
    "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "poll",
    "rank", "reducescatter", "reducescatter_async", "remove_process_set", "rocm_built",
    "shutdown", "size", "sparse_allreduce_async", "start_timeline", "stop_timeline",
    "synchronize",
]

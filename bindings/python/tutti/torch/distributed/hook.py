"""A DistributedDataParallel communication hook that averages gradient
buckets through tutti, whatever backend the DDP model's process group has
(gloo, or "tutti").

    state = TuttiHookState(compression="fp16")
    ddp.register_comm_hook(state, allreduce_hook)

Each bucket is one tutti allreduce (op Average, in place on the bucket's
flat buffer), named "<state name>.bucket<i>": DDP launches buckets in index
order and waits for all of them before the optimizer step, so the names
repeat every step and tutti's response cache and compression residuals
(top-k, int8 error feedback) follow each bucket. The returned future's value
is the averaged bucket tensor, as DDP expects.

The tutti job must have the same ranks as the DDP model's group: under
tuttirun that is automatic; under any other launcher the state joins tutti
through torch's default store when tutti is not initialised yet.
"""

import itertools
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

from tutti import basics
from tutti.compression import native_spec
from tutti.torch import _torchrun, ops
from tutti.torch.distributed import _backend
from tutti.torch.distributed._completion import complete_later

_states = itertools.count()


class TuttiHookState:
    """State of allreduce_hook.

    compression: a tutti.Compression member (none, fp16, bf16, topk(r),
    int8(b), cross_host()) or a spec string ("fp16", "topk:0.01", ...), applied by tutti's
    C++ compressors to float buckets; None (default) uses the job's
    TUTTI_COMPRESSION (tuttirun --compression), as DistributedOptimizer does.
    A Python-side (Horovod-style) compressor object is a TypeError.
    name: prefix of the tutti op names; default "ddp<n>", n counting states
    made in this process (the same on every rank when every rank makes its
    states in the same order). process_group: the DDP model's group, used to
    check that it spans every rank of the tutti job (None: the default group).
    Raises RuntimeError when torch's group and tutti's job differ.
    """

    def __init__(self, compression: object = None, name: Optional[str] = None,
                 process_group: Any = None) -> None:
        spec, python_side = native_spec(compression)
        if python_side is not None:
            raise TypeError("TuttiHookState(compression=%r): the hook takes a tutti.Compression "
                            "member or a spec string (run by tutti in C++)" % (compression,))
        self.compression = spec
        self.name = name if name is not None else "ddp%d" % next(_states)
        self._join(process_group)

    def _join(self, process_group: Any) -> None:
        if dist.is_initialized():
            group = process_group or dist.group.WORLD
            rank, size = dist.get_rank(group), dist.get_world_size(group)
            if size != dist.get_world_size():
                raise RuntimeError("TuttiHookState: the DDP group has %d of the %d ranks; the "
                                   "hook averages over every rank of the tutti job" %
                                   (size, dist.get_world_size()))
            store = dist.PrefixStore("tutti_hook", dist.distributed_c10d._get_default_store())
            _backend.ensure_joined(store, rank, size)
        elif not basics.is_initialized():
            _torchrun.set_env_from_torchrun()
            basics.init()

    # DDP may pickle its hook state; the spec and name suffice.
    def __getstate__(self) -> Dict[str, Any]:
        return {"compression": self.compression, "name": self.name}


# the state of allreduce_hook(None, ...), made on first use
_default_state: List["TuttiHookState"] = []


def _state_or_default(state: Optional[TuttiHookState]) -> TuttiHookState:
    """state, or for state None (as torch's own hooks take it) one shared
    TuttiHookState: the job's compression, op names "ddp.bucket<i>"."""
    if state is not None:
        return state
    if not _default_state:
        _default_state.append(TuttiHookState(name="ddp"))
    return _default_state[0]


# DDP's register_comm_hook accepts these two annotations and no others.
def allreduce_hook(state: Optional[TuttiHookState], bucket: dist.GradBucket
                   ) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: averages bucket.buffer() over every rank through tutti
    (with state.compression) and returns a torch.futures.Future whose value
    is that tensor. state: a TuttiHookState, or None as torch's own hooks
    take it (the job's TUTTI_COMPRESSION; DDP models that run backward at the
    same time then need states of their own, whose names differ). Errors
    (e.g. PeerLostError when a rank died) are set on the future, so DDP's
    backward raises them."""
    state = _state_or_default(state)
    tensor = bucket.buffer()
    name = "%s.bucket%d" % (state.name, bucket.index())
    handle = ops.allreduce_async_(tensor, name=name, op=ops.Average,
                                  compression=state.compression)
    devices = [str(tensor.device)] if tensor.device.type == "cuda" else None
    return complete_later(ops.c_handles_of(handle), lambda: ops.synchronize(handle), lambda t: t,
                          devices)

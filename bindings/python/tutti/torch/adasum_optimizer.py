"""DistributedOptimizer(op=Adasum): Horovod's _DistributedAdasumOptimizer
(horovod/torch/optimizer.py 0.28.1), the "delta optimizer" of the Adasum
paper (Maleki et al., MLSys 2021).

Each rank steps the wrapped optimizer on its own gradient, parameter by
parameter as soon as the gradient is ready (a hook on its gradient
accumulator); the change that step made (delta = new - old parameter) is
combined across ranks with an Adasum allreduce (tutti.torch.ops.Adasum); step()
waits for the combined deltas and sets every parameter to old + combined delta.
Optimizer state (momentum, Adam moments) therefore stays local to each rank,
as in Horovod. Delta names are "delta<P>.<param name>" (<P> as for
DistributedOptimizer's gradient names), so ranks match them whatever order the
hooks fire in.

Thread-safety: one training loop drives it; backward may run the hooks on
autograd's threads.
"""

from contextlib import contextmanager

import torch

from tutti.compression import NativeCompressor
from tutti.torch import ops
from tutti.torch._optimizer_setup import (
    check_backward_passes,
    construction_index,
    named_parameters_of,
    register_grad_hooks,
)
from tutti.torch.compression import Compression


def _check_compression(compression):
    """The Python-side compressor to run around each delta's Adasum (Horovod
    compresses the delta, reduces it, and decompresses). tutti's C++
    compressors (top-k, int8) do not apply to Adasum, and bf16 gives a dtype
    Adasum does not reduce: ValueError naming what is accepted."""
    if compression is None:
        return Compression.none
    if isinstance(compression, NativeCompressor) or compression is Compression.bf16:
        raise ValueError(
            "DistributedOptimizer(op=Adasum): compression %r does not apply to Adasum; use "
            "Compression.none, Compression.fp16 or a Python compressor" % (compression,))
    return compression


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step,
                 process_set):
        super(self.__class__, self).__init__(params)
        index = construction_index(process_set)
        self._name_prefix = "#%d" % index if index else ""
        self._compression = _check_compression(compression)
        self._process_set = process_set
        named_parameters = named_parameters_of(self.param_groups, named_parameters)
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be > 0 (got %d)"
                             % backward_passes_per_step)
        self._parameter_names = {v: k for k, v in sorted(named_parameters)}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in sorted(named_parameters)}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False)
                                 for _, p in named_parameters}
        self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        register_grad_hooks(self, allocate_grads=True)

    def _allreduce_delta_async(self, p):
        """Steps the wrapped optimizer on p alone, turns p into the delta and
        starts its in-place Adasum. Returns (handle, compression ctx)."""
        start = self._starting_models[p]
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            start.data.copy_(p)
            super(self.__class__, self).step()
            p.data.sub_(start)
        finally:
            for params, group in zip(stashed, self.param_groups):
                group["params"] = params
        compressed, ctx = self._compression.compress(p.data)
        handle = ops.allreduce_async_(compressed, name="delta%s.%s" % (
            self._name_prefix, self._parameter_names[p]), op=ops.Adasum,
            process_set=self._process_set)
        return handle, (compressed, ctx)

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                check_backward_passes(self._allreduce_delay[p])
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_delta_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Nothing to do: step() waits for the deltas (Horovod's)."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")
        yield  # pragma: no cover

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_delta_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # step() before backward_passes_per_step passes
                handle, ctx = self._allreduce_delta_async(p)
            compressed, compress_ctx = ctx
            ops.synchronize(handle)
            delta = self._compression.decompress(compressed, compress_ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() "
                                 "but before optimizer.step() or optimizer.synchronize(). "
                                 "This is prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def make(optimizer, named_parameters, compression, backward_passes_per_step, process_set):
    """The Adasum DistributedOptimizer wrapping `optimizer` (a new class
    deriving from optimizer's, as Horovod's)."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedAdasumOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               process_set)

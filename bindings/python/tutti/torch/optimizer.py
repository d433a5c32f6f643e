"""DistributedOptimizer: allreduces gradients during backward (Horovod's design).

A hook on each parameter's gradient accumulator starts an asynchronous
allreduce as soon as that gradient is ready, so communication overlaps the rest
of backward; step() waits for every handle, writes the reduced gradients back
and runs the wrapped optimizer's step. Gradient names are "grad.<param name>"
so that ranks match them whatever order the hooks fire in.

With compress_updates (the default for top-k compression) no gradient is
allreduced: step() runs the wrapped optimizer on the local gradient and
averages the resulting parameter updates ("update.<param name>") through the
compressed allreduce instead (see DistributedOptimizer).

Thread-safety: like a torch optimizer, one training loop drives it; backward
may run the hooks on autograd's threads.
"""

import math
import os
import re
import warnings
from contextlib import contextmanager

import torch

from tutti import elastic
from tutti.basics import size
from tutti.torch import ops
from tutti.compression import native_spec

# With compress_updates and top-k, a tensor whose top-k would keep fewer than
# this many entries per step (biases, small layers) is averaged whole as fp16
# instead (see _step_compressed_updates).
_MIN_TOPK_ENTRIES = 16


def _dense_below(spec):
    """Element count under which a top-k spec's tensors go whole (0: none)."""
    m = re.match(r"\s*topk:([0-9.eE+-]+)", spec or "")
    return int(math.ceil(_MIN_TOPK_ENTRIES / float(m.group(1)))) if m else 0


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, compress_updates):
        super(self.__class__, self).__init__(params)
        # A tutti compressor runs in C++ (spec); a Horovod-style one in Python.
        self._compression_spec, self._python_compression = native_spec(compression)
        effective = (self._compression_spec if self._compression_spec is not None
                     else os.environ.get("TUTTI_COMPRESSION", "none"))
        if compress_updates is None:
            compress_updates = effective.strip().lower().startswith("topk")
        if compress_updates and (self._python_compression is not None or op != ops.Average
                                 or backward_passes_per_step != 1):
            raise ValueError("compress_updates needs a tutti compression, op=Average and "
                             "backward_passes_per_step=1")
        self._compress_updates = bool(compress_updates)
        self._dense_below = _dense_below(effective) if self._compress_updates else 0
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("noname.%s" % i, v)
                                for group in self.param_groups
                                for i, v in enumerate(group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                             "usually model.named_parameters()")
        names = [k for k, _ in named_parameters]
        if len(names) != len(set(names)):
            dups = sorted({k for k in names if names.count(k) > 1})
            raise ValueError("parameter names in named_parameters must be unique; found "
                             "duplicates: %s" % ", ".join(dups))
        all_params = {id(v) for group in self.param_groups for v in group["params"]}
        named = {id(v) for _, v in named_parameters}
        unnamed = all_params - named
        if unnamed:
            raise ValueError("named_parameters was given but %d optimizer parameter(s) are not "
                             "in it" % len(unnamed))
        if op not in (ops.Average, ops.Sum, ops.Min, ops.Max, ops.Product):
            raise ValueError("op must be Average, Sum, Min, Max or Product")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %d"
                             % backward_passes_per_step)
        self._parameter_names = {v: k for k, v in sorted(named_parameters)}
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._allreduce_delay = {v: backward_passes_per_step
                                 for _, v in sorted(named_parameters)}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        # In an elastic job the size may grow later: hook every parameter now
        # (the hooks do nothing while the size is 1).
        if size() > 1 or elastic.enabled():
            self._register_hooks()

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.add(p)
                    p_tmp = p.expand_as(p)
                    grad_acc = p_tmp.grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Not computed here (dynamic graph) but other ranks may have it.
            p.grad = p.data.new(p.size()).zero_()
        name = "grad." + self._parameter_names.get(p)
        if self._python_compression is not None:
            tensor_compressed, ctx = self._python_compression.compress(p.grad)
        else:
            tensor_compressed, ctx = p.grad, None
        if self.op == ops.Average:
            prescale = 1.0 / self.gradient_predivide_factor
            postscale = self.gradient_predivide_factor
        else:
            prescale = postscale = 1.0
        handle = ops.allreduce_async_(tensor_compressed, name=name, op=self.op,
                                      prescale_factor=prescale, postscale_factor=postscale,
                                      compression=self._compression_spec)
        return handle, (ctx, tensor_compressed)

    def _make_hook(self, p):
        def hook(*ignore):
            if self._compress_updates or size() == 1:
                return  # step() averages the updates instead, or there is no one to average with
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    def synchronize(self):
        """Waits for every gradient allreduce (starting the missing ones) and
        writes the reduced gradients into p.grad. Raises TuttiError subclasses."""
        if size() == 1:
            self._synchronized = True
            return
        missing = self._requires_update - set(self._handles.keys())
        for p in sorted(missing, key=lambda q: self._parameter_names[q]):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        try:
            for p, (handle, (ctx, compressed)) in self._handles.items():
                output = ops.synchronize(handle)
                self._allreduce_delay[p] = self.backward_passes_per_step
                decompressed = (self._python_compression.decompress(output, ctx)
                                if self._python_compression is not None else output)
                if decompressed is not p.grad:
                    p.grad.copy_(decompressed)
        finally:
            self._handles.clear()
        self._synchronized = True

    def _drop_in_flight(self):
        """Forgets the gradient allreduces in flight and the accumulation
        counts, as after step(). Called by tutti.torch.elastic at a reset: the
        handles died with the previous generation's runtime."""
        self._handles.clear()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._synchronized = False

    @contextmanager
    def skip_synchronize(self):
        """Inside this context step() does not synchronize (call synchronize() first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def _step_compressed_updates(self, closure):
        # Deep Gradient Compression's momentum correction (Lin et al. 2018,
        # section 3.2), generalised to any optimizer as 1-bit Adam does (Tang
        # et al. 2021): what is compressed (with error feedback) is the update
        # the wrapped optimizer makes from this rank's gradient, not the
        # gradient. Each rank steps its own optimizer state on its local
        # gradient, the updates are averaged through the compressed
        # allreduce, and every rank applies the same average, so parameters
        # stay identical. Error feedback makes the applied updates sum to the
        # ranks' mean update over time, which an adaptive optimizer's per-
        # element normalisation would otherwise shrink for sparse gradients.
        # Small tensors are the exception (fewer elements than top-k needs to
        # keep _MIN_TOPK_ENTRIES of them): top-k would send a handful of
        # their entries per step and hold each of the others back for about
        # 1/ratio steps, which costs those layers (biases, the first
        # convolution, the classifier) most. Their gradients are averaged
        # whole, as fp16, before the step, so every rank's optimizer makes
        # the same update for them from the same gradient, as without
        # compression. They cost little (counted in bytes_sent like the
        # rest); measured in BENCHMARKS.md.
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = sorted(self._requires_update, key=lambda q: self._parameter_names[q])
        small = [p for p in params if p.numel() < self._dense_below]
        params = [p for p in params if p.numel() >= self._dense_below]
        handles = []
        for p in small:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            handles.append(ops.allreduce_async_(p.grad, name="gradient." + self._parameter_names[p],
                                                op=ops.Average, compression="fp16"))
        for handle in handles:
            ops.synchronize(handle)
        before = [p.data.clone() for p in params]
        super(self.__class__, self).step()
        handles = []
        for p, old in zip(params, before):
            delta = p.data - old
            p.data.copy_(old)
            handles.append(ops.allreduce_async_(delta, name="update." + self._parameter_names[p],
                                                op=ops.Average,
                                                compression=self._compression_spec))
        for p, handle in zip(params, handles):
            p.data.add_(ops.synchronize(handle))
        return loss

    def step(self, closure=None):
        if self._compress_updates and size() > 1:
            return self._step_compressed_updates(closure)
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without a loss.backward() since the last "
                              "synchronize(); skip_synchronize() avoids a second allreduce.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none=False):
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
                "a race condition.")
        # Gradients stay allocated: the hooks allreduce p.grad in place.
        return super(self.__class__, self).zero_grad(set_to_none=set_to_none)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=ops.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None,
                         compress_updates=None):
    """Wraps a torch optimizer so that gradients are averaged (op) across ranks.

    optimizer: any torch.optim.Optimizer (its param_groups and options are
    kept; its state starts empty). named_parameters: model.named_parameters(),
    so that gradient names are stable across ranks (recommended). compression:
    None (the job's TUTTI_COMPRESSION / tuttirun --compression, default none),
    or tutti.Compression.none / fp16 / bf16 / topk(ratio) / int8(block): run
    in C++ on tutti's background thread, per gradient name (topk and int8 keep
    error-feedback residuals per gradient); a Horovod-style Python compressor
    object still works. backward_passes_per_step: local
    gradient accumulation steps before each allreduce. op: Average (default),
    Sum, Min, Max, Product. gradient_predivide_factor: with Average, divides
    before the sum and multiplies after (numerics only). num_groups, groups,
    sparse_as_dense, process_set: accepted for Horovod compatibility
    (grouping is done by tutti's fusion; sparse gradients are not supported).
    compress_updates: True averages the wrapped optimizer's updates instead of
    the gradients (each rank steps its own optimizer state on its local
    gradient; the updates go through the compressed allreduce with error
    feedback and every rank applies the same mean): Deep Gradient
    Compression's momentum correction, in the form that also suits adaptive
    optimizers (Adam). None (default): True for top-k compression (the spec
    given, or the job default), False otherwise. Needs op=Average,
    backward_passes_per_step=1 and a tutti compression. Optimizer state then
    differs between ranks (each holds its own moments). Tensors too small for
    top-k to keep 16 of their entries per step (< 1600 elements at 1 %) are
    the exception: their gradients are averaged whole, as fp16, before the
    step.
    """
    del num_groups, groups, sparse_as_dense
    ops._check_process_set(process_set)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, compress_updates)

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
from tutti.errors import MismatchError
from tutti.torch.functions import allgather_object

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
        implicit = compress_updates is None
        if compress_updates is None:
            compress_updates = effective.strip().lower().startswith("topk")
        if compress_updates and (self._python_compression is not None or op != ops.Average
                                 or backward_passes_per_step != 1):
            raise ValueError(
                "compress_updates needs a tutti compression, op=Average and "
                "backward_passes_per_step=1" +
                (" (top-k compression turns it on: pass compress_updates=False to compress the "
                 "gradients instead)" if implicit else ""))
        self._compress_updates = bool(compress_updates)
        self._dense_below = _dense_below(effective) if self._compress_updates else 0
        # What every rank must agree on (checked at the first exchange of each
        # membership generation): the names and paths of the exchanges depend
        # on it, so ranks that differ would wait for each other's tensors forever.
        self._exchange_kind = "%s%s" % (
            effective.strip().lower() if self._python_compression is None
            else "python:" + type(self._python_compression).__name__,
            " (compress_updates)" if compress_updates else "")
        self._checked_generation = None
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
        self._check_same_exchange()
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

    def _check_same_exchange(self):
        """Once per membership generation, before the first exchange: raises
        MismatchError naming the ranks when they use different compression
        (an allgather of a short string)."""
        generation = elastic.generation()
        if self._checked_generation == generation:
            return
        kinds = allgather_object(self._exchange_kind, name="tutti.optimizer.compression")
        self._checked_generation = generation
        if len(set(kinds)) > 1:
            raise MismatchError(
                "DistributedOptimizer: ranks use different compression: " +
                ", ".join("rank %d %s" % (r, k) for r, k in enumerate(kinds)) +
                " (every rank must pass the same compression=, or the same TUTTI_COMPRESSION)",
                MismatchError.code)

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
        self._check_same_exchange()
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
        if self._adam_corrected():
            deltas = self._corrected_adam_deltas(params)
        else:
            before = [p.data.clone() for p in params]
            super(self.__class__, self).step()
            deltas = []
            for p, old in zip(params, before):
                deltas.append(p.data - old)
                p.data.copy_(old)
        handles = []
        for p, delta in zip(params, deltas):
            handles.append(ops.allreduce_async_(delta, name="update." + self._parameter_names[p],
                                                op=ops.Average,
                                                compression=self._compression_spec))
        for p, handle in zip(params, handles):
            p.data.add_(ops.synchronize(handle))
        return loss

    def _adam_corrected(self):
        """Whether the updates come from _corrected_adam_deltas: the wrapped
        optimizer is plain torch.optim.Adam (no amsgrad, maximize)."""
        return (isinstance(self, torch.optim.Adam) and
                not any(g.get("amsgrad") or g.get("maximize") for g in self.param_groups))

    def _corrected_adam_deltas(self, params):
        # Adam for the top-k'd tensors with the second moment of the
        # *averaged* gradient, estimated from local statistics (no bytes).
        # Each rank sees g_i = mu + noise_i (batch B); Adam on the average of
        # n ranks' gradients normalises by E[gbar^2] = mu^2 + sigma^2/n,
        # local Adam by E[g_i^2] = mu^2 + sigma^2, up to n times more: the
        # averaged local updates are up to sqrt(n) too small where noise
        # dominates (measured: topk:1 0.8 points below none). With
        # v = EMA(g_i^2) and w = EMA(mhat^2) (mhat: the bias-corrected first
        # moment, an estimate of mu whose noise is sigma^2 (1-b1)/(1+b1)),
        #   v_avg ~= v / n + (1 - 1/n) w,
        # i.e. sigma^2 = v - mu^2 shrunk n-fold (the variance of a mean of n
        # independent gradients). Between v/n and about v. With one v shared
        # by all ranks the update would be linear in m and averaging the
        # ranks' updates exactly Adam on the averaged gradient; each rank's v
        # here is its own estimate of that quantity (1-bit Adam's
        # observation, Tang et al. 2021, section 3, which freezes v after a
        # dense warm-up instead; this spends no bytes on it). The remaining
        # tensors (no params here, or the small ones averaged whole before
        # the step) take the wrapped optimizer's own step.
        n = float(size())
        wanted = set(params)
        hidden = []
        for p in params:
            if p.grad is not None:
                hidden.append((p, p.grad))
                p.grad = None
        try:
            super(self.__class__, self).step()  # the small tensors (plain Adam)
        finally:
            for p, g in hidden:
                p.grad = g
        deltas = {}
        with torch.no_grad():
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
                for p in group["params"]:
                    if p not in wanted:
                        continue
                    if p.grad is None:
                        deltas[p] = torch.zeros_like(p)
                        continue
                    grad = p.grad if weight_decay == 0 else p.grad.add(p, alpha=weight_decay)
                    state = self.state[p]
                    if len(state) == 0 or "exp_avg" not in state:
                        state["step"] = torch.tensor(0.0)
                        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        state["exp_avg_sq"] = torch.zeros_like(p,
                                                               memory_format=torch.preserve_format)
                    if "exp_avg_sq_of_mean" not in state:
                        state["exp_avg_sq_of_mean"] = torch.zeros_like(
                            p, memory_format=torch.preserve_format)
                    state["step"] += 1
                    t = float(state["step"])
                    m, v, w = state["exp_avg"], state["exp_avg_sq"], state["exp_avg_sq_of_mean"]
                    m.mul_(beta1).add_(grad, alpha=1 - beta1)
                    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    bias1, bias2 = 1 - beta1 ** t, 1 - beta2 ** t
                    m_hat = m / bias1
                    w.mul_(beta2).addcmul_(m_hat, m_hat, value=1 - beta2)
                    v_avg = (v / n).add_(w, alpha=1 - 1 / n).div_(bias2)
                    deltas[p] = m_hat.div_(v_avg.sqrt_().add_(eps)).mul_(-lr)
        return [deltas[p] for p in params]

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
    differs between ranks (each holds its own moments). With torch.optim.Adam
    (no amsgrad/maximize) the updates normalise by an estimate of the
    *averaged* gradient's second moment made from local statistics (state
    "exp_avg_sq_of_mean", kept in state_dict), so that averaging the updates
    is Adam on the averaged gradient rather than smaller steps. Tensors too small for
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

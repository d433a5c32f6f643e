"""compress_updates for DistributedOptimizer: the wrapped optimizer steps on
each rank's local gradient and the parameter updates, not the gradients, are
averaged through tutti's compressed allreduce (see
tutti.torch.optimizer.DistributedOptimizer). `self` below is the
DistributedOptimizer; self._wrapped_step() is the wrapped optimizer's step.
"""

import torch

from tutti import process_sets
from tutti.torch import ops


def step_compressed_updates(self, closure):
    """DistributedOptimizer.step() with compress_updates (see below)."""
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
        handles.append(ops.allreduce_async_(p.grad, name=self._tensor_name("gradient", p),
                                            op=ops.Average, process_set=self.process_set,
                                            compression="fp16"))
    for handle in handles:
        ops.synchronize(handle)
    if self._adam_corrected():
        deltas = corrected_adam_deltas(self, params)
    else:
        before = [p.data.clone() for p in params]
        self._wrapped_step()
        deltas = []
        for p, old in zip(params, before):
            deltas.append(p.data - old)
            p.data.copy_(old)
    handles = []
    for p, delta in zip(params, deltas):
        handles.append(ops.allreduce_async_(delta, name=self._tensor_name("update", p),
                                            op=ops.Average, process_set=self.process_set,
                                            compression=self._compression_spec))
    for p, handle in zip(params, handles):
        p.data.add_(ops.synchronize(handle))
    return loss

def corrected_adam_deltas(self, params):
    """The Adam updates of `params` normalised by the averaged gradient's moment."""
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
    n = float(process_sets.set_size(self.process_set))
    wanted = set(params)
    hidden = []
    for p in params:
        if p.grad is not None:
            hidden.append((p, p.grad))
            p.grad = None
    try:
        self._wrapped_step()  # the small tensors (plain Adam)
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

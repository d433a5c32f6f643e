"""Synchronized batch normalization: Horovod's ``hvd.SyncBatchNorm`` (and
PyTorch's ``torch.nn.SyncBatchNorm``) on tutti's collectives.

In training, a batch-norm layer normalises with the statistics of the
*global* batch (every rank's samples; with process_group=, every member's)
instead of this rank's alone, which
matters when the per-rank batch is small. Forward: each rank computes, per
channel, its sample count, mean and sum of squared deviations (M2); one
allgather brings every rank's, combined with Chan et al.'s parallel-variance
formula ("Updating Formulae and a Pairwise Algorithm for Computing Sample
Variances", 1979), which neither loses precision like sum-of-squares nor needs
equal batch sizes. Backward: one allreduce (sum) of the per-channel sums of
dy and dy * x_hat gives the input gradient of the global batch; the weight
and bias gradients stay this rank's own sums (DistributedOptimizer averages
them, as with Horovod and DDP). Running statistics use the global mean and
the unbiased global variance, as torch.nn.BatchNorm on the global batch.

Shapes: input (N, C) or (N, C, *) with N >= 0 on each rank (ranks may differ;
a rank with N = 0 contributes nothing; all empty: an empty output, running
statistics unchanged), float16/bfloat16 (statistics in float32), float32 or
float64; CPU or (CUDA builds) CUDA tensors. The same at every world size (at
1 the collectives are local). Eval mode is torch's F.batch_norm, so there
float16 on the CPU raises torch's RuntimeError, as torch.nn.BatchNorm does.
Errors: ValueError for a non-floating input, fewer than 2 dimensions, a
channel count that is not num_features, or exactly 1 value per channel over
the global batch (as torch); tutti.TuttiError
subclasses from the collectives (every rank must run the layer in training
the same number of times, in the same order, and the input's requires_grad
must agree: the backward's allreduce runs only when the input needs a
gradient). Double backward (create_graph=True through the layer) raises.
In eval mode no collective runs (as torch.nn.SyncBatchNorm): the running
statistics, or without them this rank's own batch; one rank may evaluate
alone. Threading: as the module's forward/backward.
"""

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.nn.modules.batchnorm import _BatchNorm

# Horovod's sync_batch_norm module imports size and the ops' names from mpi_ops.
from tutti.basics import size  # noqa: F401
from tutti.torch import ops
from tutti.torch._core import process_set_id
from tutti.torch.ops import Sum, allgather_async, allreduce_async, synchronize  # noqa: F401

__all__ = ["SyncBatchNorm"]


def _stat_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _per_channel(t, x):
    """A (C,) tensor shaped to broadcast against x of shape (N, C, *)."""
    return t.reshape((1, -1) + (1,) * (x.dim() - 2))


def _fused(x, weight):
    """Whether the output goes through F.batch_norm as it is: float32/float64
    with a weight of the same dtype (float16/bfloat16 and mixed dtypes, on any
    device, go through plain tensor ops in float32)."""
    return x.dtype in (torch.float32, torch.float64) and (weight is None or weight.dtype == x.dtype)


def _reduce_dims(x):
    return [0] + list(range(2, x.dim()))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        channels = x.shape[1]
        stat = _stat_dtype(x.dtype)
        count = x.numel() // channels
        if count > 0:
            # Two passes (mean, then squared deviations): exact enough, and
            # much faster on the CPU than torch.var_mean over several dims.
            xs = x.to(stat)
            mean = xs.mean(dim=_reduce_dims(x))
            m2 = (xs - _per_channel(mean, x)).square_().sum(dim=_reduce_dims(x))
        else:
            mean = x.new_zeros(channels, dtype=stat)
            m2 = x.new_zeros(channels, dtype=stat)
        mine = torch.cat([mean.new_tensor([float(count)]), mean, m2]).unsqueeze(0)
        # (set size, 1 + 2C), rank order, on x's device
        every = ops.allgather(mine, process_set=process_set)
        ctx.process_set = process_set
        counts = every[:, 0]
        total = counts.sum()
        total_count = total.item()
        ctx.bias_dtype = None if bias is None else bias.dtype
        if total_count == 0:  # every rank's batch is empty: nothing to normalise
            ctx.save_for_backward(x, weight, mean.new_zeros(channels), mean.new_ones(channels))
            ctx.total = 1.0
            return x.new_empty(x.shape)
        if total_count == 1:
            raise ValueError(
                "Expected more than 1 value per channel when training, got %d over every rank's "
                "batch (input size %s on this rank)" % (int(total_count), list(x.shape)))
        means = every[:, 1:1 + channels]
        m2s = every[:, 1 + channels:]
        global_mean = (counts[:, None] * means).sum(dim=0) / total
        global_m2 = (m2s + counts[:, None] * (means - global_mean) ** 2).sum(dim=0)
        var = global_m2 / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = global_m2 / (total - 1)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        ctx.save_for_backward(x, weight, global_mean, invstd)
        ctx.total = total
        if _fused(x, weight):
            # One pass: the global statistics as batch_norm's "running" ones.
            return F.batch_norm(x, global_mean, var, weight, bias, False, 0.0, eps)
        y = (x.to(stat) - _per_channel(global_mean, x)) * _per_channel(invstd, x)
        if weight is not None:
            y = y * _per_channel(weight.to(stat), x)
        if bias is not None:
            y = y + _per_channel(bias.to(stat), x)
        return y.to(x.dtype)

    @staticmethod
    @once_differentiable  # mean, invstd and the peers' sums are constants here
    def backward(ctx, dy):
        x, weight, mean, invstd = ctx.saved_tensors
        stat = mean.dtype
        x_s, dy_s = x.to(stat), dy.to(stat)
        x_mu = x_s - _per_channel(mean, x)
        sum_dy = dy_s.sum(dim=_reduce_dims(x))
        sum_dy_x_hat = (dy_s * x_mu).sum(dim=_reduce_dims(x)) * invstd
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            channels = x.shape[1]
            both = ops.allreduce(torch.cat([sum_dy, sum_dy_x_hat]), op=ops.Sum,
                                 process_set=ctx.process_set)
            mean_dy = both[:channels] / ctx.total
            mean_dy_x_hat = both[channels:] / ctx.total
            # (dy - mean_dy - x_hat * mean_dy_x_hat) * invstd * weight, as
            # dy * k + (x - mean) * k_x + k_0 per channel.
            k = invstd if weight is None else invstd * weight.to(stat)
            k_x = -invstd * mean_dy_x_hat * k
            k_0 = -mean_dy * k
            grad_x = x_mu.mul_(_per_channel(k_x, x))
            grad_x.add_(_per_channel(k_0, x)).addcmul_(dy_s, _per_channel(k, x))
            grad_x = grad_x.to(x.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_x_hat.to(weight.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(ctx.bias_dtype)
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over the global batch of every rank (see the module
    docstring). Arguments as torch.nn.SyncBatchNorm: num_features (C), eps,
    momentum (None: cumulative average), affine, track_running_stats,
    process_group, device, dtype. Input (N, C) or (N, C, *).

    process_group: None or tutti.torch.global_process_set (every rank), or a
    registered tutti.ProcessSet: the statistics are those of its members'
    batches (torch's process_group with tutti's sets; only members may run
    the layer in training). An unregistered set is a ValueError here."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None):
        process_set_id(process_group)
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, x):
        if not torch.is_floating_point(x):
            raise ValueError("SyncBatchNorm needs a floating-point input (float16, bfloat16, "
                             "float32, float64), got %s" % x.dtype)
        if x.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input): SyncBatchNorm expects "
                             "an input of shape (N, C) or (N, C, *), got %d dimension(s)"
                             % (x.dim(), x.dim()))
        if x.shape[1] != self.num_features:
            raise ValueError("SyncBatchNorm(%d) got %d channels (input size %s)"
                             % (self.num_features, x.shape[1], list(x.shape)))

    def forward(self, x):
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training:
            # Never synchronised (as torch.nn.SyncBatchNorm): the running
            # statistics, or without them this rank's own batch; so one rank
            # may evaluate alone.
            own_batch = self.running_mean is None and self.running_var is None
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                own_batch, 0.0, self.eps)
        update = self.track_running_stats
        return _SyncBatchNormFunction.apply(
            x, self.weight, self.bias, self.running_mean if update else None,
            self.running_var if update else None, self.eps, factor, self.process_group)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """Returns `module` with every torch.nn.BatchNorm1d/2d/3d (any
        _BatchNorm) replaced by a SyncBatchNorm holding the same parameters,
        buffers and mode (as torch.nn.SyncBatchNorm.convert_sync_batchnorm).
        process_group: as SyncBatchNorm's (None: every rank)."""
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.train(module.training)
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted

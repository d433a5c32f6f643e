"""DistributedOptimizer: allreduces gradients during backward (Horovod's design).

A hook on each parameter's gradient accumulator starts an asynchronous
allreduce as soon as that gradient is ready, so communication overlaps the rest
of backward; step() waits for every handle, writes the reduced gradients back
and runs the wrapped optimizer's step. Gradient names are "grad<P>.<param
name>" so that ranks match them whatever order the hooks fire in; <P> is ""
for the first DistributedOptimizer a process constructs and "#k" for the k-th
after it, so that two optimizers over parameters of equal names (a GAN's
generator and discriminator) never reduce each other's gradients. Sparse
gradients (nn.Embedding(sparse=True)) are allgathered
(tutti.torch.sparse), or allreduced dense with sparse_as_dense; with groups=
a group's gradients go as one grouped allreduce named "group<P>.<first name>".

With compress_updates (the default for top-k compression) no gradient is
allreduced: step() runs the wrapped optimizer on the local gradient and
averages the resulting parameter updates ("update<P>.<param name>") through the
compressed allreduce instead (tutti.torch._update_averaging).

Thread-safety: like a torch optimizer, one training loop drives it; backward
may run the hooks on autograd's threads. Construct DistributedOptimizers in
the same order on every rank (the construction checks it).
"""

import math
import os
import re
import warnings
from contextlib import contextmanager
from typing import Any, Iterable, Optional, Tuple

import torch

# The names marked F401 are Horovod's optimizer module's imports, which
# scripts import from it.
from tutti import elastic, process_sets
from tutti.basics import (
    rocm_built,  # noqa: F401
    size,
)
from tutti.compression import native_spec
from tutti.errors import MismatchError
from tutti.process_sets import ProcessSet, global_process_set  # noqa: F401
from tutti.torch import _update_averaging, adasum_optimizer, ops
from tutti.torch._optimizer_setup import (
    check_backward_passes,
    check_groups,
    construction_index,
    form_groups,
    named_parameters_of,
    register_grad_hooks,
    split_list,  # noqa: F401 (Horovod's optimizer module defines it)
)
from tutti.torch.compression import Compression  # noqa: F401
from tutti.torch.functions import (
    allgather_object,
    broadcast_object,  # noqa: F401
)
from tutti.torch.ops import (  # noqa: F401
    Adasum,
    Average,
    Sum,
    allreduce_async_,
    grouped_allreduce_async_,
    synchronize,
)
from tutti.torch.sparse import sparse_allreduce_async

# With compress_updates and top-k, a tensor whose top-k would keep fewer than
# this many entries per step (biases, small layers) is averaged whole as fp16
# instead (see _update_averaging.step_compressed_updates).
_MIN_TOPK_ENTRIES = 16

def _dense_below(spec):
    """Element count under which a top-k spec's tensors go whole (0: none)."""
    m = re.match(r"\s*topk:([0-9.eE+-]+)", spec or "")
    return int(math.ceil(_MIN_TOPK_ENTRIES / float(m.group(1)))) if m else 0


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, compress_updates,
                 process_set):
        super(self.__class__, self).__init__(params)
        self.process_set = process_set
        self._index = construction_index(process_set)
        self._name_prefix = "#%d" % self._index if self._index else ""
        self._set_compression(compression, compress_updates, op, backward_passes_per_step)
        named_parameters = named_parameters_of(self.param_groups, named_parameters)
        # Adasum comes here only on one rank (Horovod's choice; otherwise
        # tutti.torch.adasum_optimizer): its allreduce of one rank is the identity.
        if op not in (ops.Average, ops.Sum, ops.Min, ops.Max, ops.Product, ops.Adasum):
            raise ValueError("op must be Average, Sum, Min, Max, Product or Adasum")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be > 0 (got %d)"
                             % backward_passes_per_step)
        check_groups(groups)
        self._parameter_names = {v: k for k, v in sorted(named_parameters)}
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = bool(sparse_as_dense)
        self._allreduce_delay = {v: backward_passes_per_step
                                 for _, v in sorted(named_parameters)}
        self._handles = {}
        self._sparse_dims = {}  # parameter -> sparse_dim of its last sparse gradient
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._groups = groups
        self._p_to_group = form_groups(self.param_groups, groups)
        self._group_counts = {g: 0 for g in set(self._p_to_group.values())}
        self._exchange_kind += " sparse_as_dense" if self.sparse_as_dense else ""
        self._exchange_kind += " groups=%d" % len(self._group_counts) if groups else ""
        self._checked_generation = None
        # A rank outside process_set exchanges nothing: step() is the wrapped
        # optimizer's on its own gradients (Horovod's behaviour).
        self._included = process_set is None or process_set.included()
        if self._included and size() > 1 and not elastic.enabled():
            self._check_same_exchange(at_construction=True)
        # In an elastic job the size may grow later: hook every parameter now
        # (the hooks do nothing while the size is 1).
        if self._included and (size() > 1 or elastic.enabled()):
            self._register_hooks()

    def _set_compression(self, compression, compress_updates, op, backward_passes_per_step):
        # A tutti compressor runs in C++ (spec); a Horovod-style one in Python
        # around an uncompressed allreduce (whatever the job's default).
        self._compression_spec, self._python_compression = native_spec(compression)
        if self._python_compression is not None:
            self._compression_spec = "none"
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
        # What every rank must agree on (checked at construction, or in an
        # elastic job at the first exchange of each membership generation):
        # the names and paths of the exchanges depend on it, so ranks that
        # differ would wait for each other's tensors forever.
        python = self._python_compression
        self._exchange_kind = "%s%s" % (
            effective.strip().lower() if python is None
            else "python:" + getattr(python, "__name__", type(python).__name__),
            " (compress_updates)" if compress_updates else "")

    def _tensor_name(self, kind, p):
        return "%s%s.%s" % (kind, self._name_prefix, self._parameter_names[p])

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's load_state_dict; forgets the allreduces in
        flight and the accumulation counts, as Horovod's."""
        self._forget_exchanges()
        self._should_synchronize = True
        return super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        """Changes backward_passes_per_step (and restarts the counts), as Horovod's."""
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        # No gradient is allocated here (Horovod's way): a sparse gradient
        # must not be accumulated into a dense zero tensor.
        register_grad_hooks(self, allocate_grads=False)

    def _scale_factors(self):
        """(prescale, postscale): Average splits gradient_predivide_factor around the sum."""
        if self.op == ops.Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _dense_grad(self, p):
        """p.grad to allreduce (zeros when this rank computed none: dynamic
        graphs; a dense copy of a sparse gradient)."""
        if p.grad is None:
            p.grad = p.data.new(p.size()).zero_()
        return p.grad.to_dense() if p.grad.is_sparse else p.grad

    def _compress(self, tensor):
        if self._python_compression is None:
            return tensor, None
        return self._python_compression.compress(tensor)

    def _allreduce_grad_async(self, p):
        self._check_same_exchange()
        name = self._tensor_name("grad", p)
        if p.grad is None and p in self._sparse_dims and not self.sparse_as_dense:
            # No gradient here this step, sparse ones before: take part in
            # the others' allgather with no entries.
            dims = self._sparse_dims[p]
            p.grad = torch.sparse_coo_tensor(
                torch.zeros(dims, 0, dtype=torch.int64, device=p.device),
                p.data.new_zeros((0,) + tuple(p.shape[dims:])), p.shape)
        if p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense:
            self._sparse_dims[p] = p.grad.sparse_dim()
            return sparse_allreduce_async(p.grad, name=name, op=self.op,
                                          process_set=self.process_set), None
        compressed, ctx = self._compress(self._dense_grad(p))
        prescale, postscale = self._scale_factors()
        handle = ops.allreduce_async_(compressed, name=name, op=self.op,
                                      prescale_factor=prescale, postscale_factor=postscale,
                                      process_set=self.process_set,
                                      compression=self._compression_spec)
        return handle, (ctx,)

    def _grouped_allreduce_grad_async(self, group):
        self._check_same_exchange()
        sparse = [self._parameter_names[p] for p in group
                  if p.grad is not None and p.grad.is_sparse and not self.sparse_as_dense]
        if sparse:
            raise ValueError("DistributedOptimizer(groups=...): %s has a sparse gradient; "
                             "pass sparse_as_dense=True" % ", ".join(sparse))
        pairs = [self._compress(self._dense_grad(p)) for p in group]
        prescale, postscale = self._scale_factors()
        handle = ops.grouped_allreduce_async_(
            [c for c, _ in pairs], name=self._tensor_name("group", group[0]), op=self.op,
            prescale_factor=prescale, postscale_factor=postscale, process_set=self.process_set,
            compression=self._compression_spec)
        return handle, [(ctx,) for _, ctx in pairs]

    def _check_same_exchange(self, at_construction=False):
        """Raises MismatchError naming the ranks when they use different
        compression (an allgather of a short string) or constructed their
        DistributedOptimizers in different numbers. At construction (the same
        place in the program on every rank), or in an elastic job once per
        membership generation before the first exchange."""
        generation = elastic.generation()
        if self._checked_generation == generation:
            return
        if at_construction:
            mine = (self._exchange_kind, self._index)
            kinds = allgather_object(mine, name="tutti.optimizer.check",
                                     process_set=self.process_set)
        else:
            mine = (self._exchange_kind, None)
            kinds = allgather_object(mine, name="tutti.optimizer%s.check" % self._name_prefix,
                                     process_set=self.process_set)
        kinds = list(zip(process_sets.set_ranks(self.process_set), kinds))
        self._checked_generation = generation
        if len({k for _, (k, _) in kinds}) > 1:
            raise MismatchError(
                "DistributedOptimizer: ranks use different compression: " +
                ", ".join("rank %d %s" % (r, k) for r, (k, _) in kinds) +
                " (every rank must pass the same compression=, or the same TUTTI_COMPRESSION)",
                MismatchError.code)
        if len({i for _, (_, i) in kinds}) > 1:
            raise MismatchError(
                "DistributedOptimizer: ranks constructed different numbers of "
                "DistributedOptimizers (over this process set) before this one: " +
                ", ".join("rank %d %d" % (r, i) for r, (_, i) in kinds) +
                " (construct them in the same order on every rank)", MismatchError.code)

    def _make_hook(self, p):
        def hook(*ignore):
            if self._compress_updates or size() == 1:
                return  # step() averages the updates instead, or there is no one to average with
            check_backward_passes(self._allreduce_delay[p])
            assert not p.grad.requires_grad
            self._allreduce_delay[p] -= 1
            group = self._p_to_group.get(p)
            if self._allreduce_delay[p] > 0:
                self._handles[p] = (None, None)  # accumulating locally
            elif group is None:
                self._handles[p] = self._allreduce_grad_async(p)
            else:
                self._group_counts[group] += 1
                self._handles[p] = (None, None)
                if self._group_counts[group] == len(group):
                    self._start_group(group)

        return hook

    def _start_group(self, group):
        for q in group:
            self._handles.pop(q, None)
        self._handles[group] = self._grouped_allreduce_grad_async(group)
        self._group_counts[group] = 0

    def _start_missing(self):
        """Starts every allreduce not started yet (whole groups), in name order."""
        started = set()
        for key, (handle, _) in list(self._handles.items()):
            if handle is None:
                del self._handles[key]
            else:
                started.update(key if isinstance(key, tuple) else (key,))
        for p in sorted(self._requires_update - started, key=self._parameter_names.get):
            if p in started:
                continue
            group = self._p_to_group.get(p)
            if group is None:
                self._handles[p] = self._allreduce_grad_async(p)
            else:
                self._start_group(group)
                started.update(group)

    def _write_back(self, p, output, ctx):
        if ctx is not None and self._python_compression is not None:
            output = self._python_compression.decompress(output, ctx[0])
        if p.grad.is_sparse:
            if not output.is_sparse:  # sparse_as_dense
                output = output.to_sparse(p.grad.sparse_dim())
            p.grad.zero_().add_(output)  # (sparse tensors have no set_)
        elif output is not p.grad:
            p.grad.copy_(output)

    def synchronize(self):
        """Waits for every gradient allreduce (starting the missing ones) and
        writes the reduced gradients into p.grad. Raises TuttiError subclasses.
        Does nothing on a rank outside the optimizer's process set."""
        if size() == 1 or not self._included:
            self._synchronized = True
            return
        try:
            self._start_missing()
            for key, (handle, ctx) in self._handles.items():
                output = ops.synchronize(handle)
                if isinstance(key, tuple):
                    for p, out, c in zip(key, output, ctx):
                        self._write_back(p, out, c)
                else:
                    self._write_back(key, output, ctx)
        finally:
            self._forget_exchanges()
        self._synchronized = True

    def _drop_in_flight(self):
        """Forgets the gradient allreduces in flight and the accumulation
        counts, as after step(). Called by tutti.torch.elastic at a reset: the
        handles died with the previous generation's runtime."""
        self._forget_exchanges()

    def _forget_exchanges(self):
        self._handles.clear()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for group in self._group_counts:
            self._group_counts[group] = 0
        self._synchronized = False

    @contextmanager
    def skip_synchronize(self):
        """Inside this context step() does not synchronize (call synchronize() first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def _adam_corrected(self):
        """Whether the updates come from _update_averaging.corrected_adam_deltas:
        the wrapped optimizer is plain torch.optim.Adam (no amsgrad, maximize)."""
        return (isinstance(self, torch.optim.Adam) and
                not any(g.get("amsgrad") or g.get("maximize") for g in self.param_groups))

    def _wrapped_step(self, closure=None):
        return super(self.__class__, self).step(closure)

    def step(self, closure=None):
        if self._compress_updates and size() > 1 and self._included:
            return _update_averaging.step_compressed_updates(self, closure)
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.", stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return self._wrapped_step(closure)

    def zero_grad(self, *args, **kwargs):
        """The wrapped optimizer's zero_grad (set_to_none as torch's own,
        default included); AssertionError while allreduces are in flight."""
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
                "a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer: torch.optim.Optimizer,
                         named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
                         compression: object = None, backward_passes_per_step: int = 1,
                         op: int = ops.Average, gradient_predivide_factor: float = 1.0,
                         num_groups: int = 0, groups: Any = None, sparse_as_dense: bool = False,
                         process_set: Optional[object] = None,
                         compress_updates: Optional[bool] = None) -> torch.optim.Optimizer:
    """Wraps a torch optimizer so that gradients are averaged (op) across ranks.

    optimizer: any torch.optim.Optimizer (its param_groups and options are
    kept; its state starts empty). named_parameters: model.named_parameters(),
    so that gradient names are stable across ranks (without it, parameters
    are named "allreduce.noname.<group>.<index>", as in Horovod). Two
    DistributedOptimizers never mix their gradients, even over equal names.
    compression: None (the job's TUTTI_COMPRESSION / tuttirun --compression,
    default none), tutti.Compression.none / fp16 / bf16 / topk(ratio) /
    int8(block): run in C++ on tutti's background thread, per gradient name
    (topk and int8 keep error-feedback residuals per gradient); or a Horovod
    Compressor (a tutti.torch.compression.Compressor subclass, or any object
    with compress/decompress): its compress(grad) -> (tensor, ctx) runs before
    an uncompressed allreduce and decompress(tensor, ctx) after.
    backward_passes_per_step: local gradient accumulation steps before each
    allreduce. op: Average (default), Sum, Min, Max, Product, or Adasum: with
    more than one rank, Horovod's Adasum optimizer (tutti.torch.adasum_optimizer:
    each rank steps the wrapped optimizer on its own gradient and the
    parameter changes are combined with Adasum; compression none, fp16 or a
    Python compressor; groups, sparse_as_dense, gradient_predivide_factor and
    compress_updates do not apply). gradient_predivide_factor: with Average, divides
    before the sum and multiplies after (numerics only; ValueError with
    another op). groups: an int (the parameters in that many consecutive
    groups) or a list of lists of parameters; each group's gradients go as
    one grouped allreduce once all of them are ready. num_groups: deprecated
    for groups, as in Horovod. sparse_as_dense: sparse gradients are
    allreduced as dense tensors (and made sparse again, so that e.g.
    SparseAdam still steps) instead of allgathered (a rank that computed no
    gradient for a parameter sends an empty sparse one if the parameter's
    gradient was sparse before, else dense zeros: without sparse_as_dense
    every rank must compute a sparse gradient in the first step, as in
    Horovod). process_set: None or global_process_set (every rank), or a
    registered tutti.ProcessSet: gradients are averaged over its members
    only (Average divides by its size); a rank outside it keeps its own
    gradients (step() is the wrapped optimizer's), as in Horovod. Members
    construct their optimizers over a set in the same order.
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

    With size() > 1 (outside elastic jobs) the construction is a collective
    over process_set's members (every rank checks that the others chose the
    same compression).
    """
    process_sets.process_set_id(process_set)  # ValueError for an unregistered set, before anything
    if gradient_predivide_factor != 1.0 and op != ops.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed "
                      "in v0.23.0.", DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    if op == ops.Adasum and size() > 1:
        return adasum_optimizer.make(optimizer, named_parameters, compression,
                                     backward_passes_per_step, process_set)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups, sparse_as_dense, compress_updates,
               process_set)

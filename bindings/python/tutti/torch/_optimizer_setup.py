"""What both distributed optimizers (tutti.torch.optimizer's
DistributedOptimizer and tutti.torch.adasum_optimizer's Adasum one) do at
construction and in their gradient hooks: check the parameter names and
groups (Horovod's rules and messages, horovod/torch/optimizer.py 0.28.1),
hook the gradient accumulators, and count the optimizers built per process
set (the "#k" of their tensor names).

Thread-safety: construction_index may be called from any thread; the rest
runs in the one training loop that builds the optimizer.
"""

import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from tutti import process_sets

# The construction index of each DistributedOptimizer of this process per
# process set id (the "#k" of its tensor names): the members of a set count
# the optimizers over that set, whatever they construct for other sets.
_constructed: Dict[int, int] = {}
_constructed_lock = threading.Lock()


def check_backward_passes(remaining: int) -> None:
    """Horovod's error for a gradient computed more than backward_passes_per_step
    times before step(): `remaining` is the parameter's allreduce delay left."""
    if remaining <= 0:
        raise AssertionError(
            "Gradients were computed more than backward_passes_per_step times "
            "before call to step(). Increase backward_passes_per_step to "
            "accumulate gradients locally.")


def named_parameters_of(param_groups: Sequence[Dict[str, Any]],
                        named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]]
                        ) -> List[Tuple[str, torch.Tensor]]:
    """The checked list of (name, parameter); without named_parameters,
    Horovod's generated names "allreduce.noname.<group>.<index>"."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (i, j), v)
                            for i, group in enumerate(param_groups)
                            for j, v in enumerate(group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [k for k, _ in named_parameters]
    if len(names) != len(set(names)):
        dups = sorted({k for k in names if names.count(k) > 1})
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(dups))
    all_params = {id(v) for group in param_groups for v in group["params"]}
    unnamed = all_params - {id(v) for _, v in named_parameters}
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: %s (%d optimizer parameter(s) "
                         "not in named_parameters)"
                         % (", ".join(str(i) for i in sorted(unnamed)), len(unnamed)))
    return named_parameters


def split_list(items: Sequence[Any], n: int) -> List[Sequence[Any]]:
    """items in n consecutive parts, the first len % n one longer (Horovod's split_list)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def check_groups(groups: object) -> None:
    if groups is None:
        return
    if isinstance(groups, bool) or not (isinstance(groups, list) or
                                        (isinstance(groups, int) and groups > 0)):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "torch.Tensor. (got %r; an integer must be positive)" % (groups,))
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))


def form_groups(param_groups: Sequence[Dict[str, Any]], groups: Any
                ) -> Dict[torch.Tensor, Tuple[torch.Tensor, ...]]:
    """{parameter: its group (a tuple)} for groups= (None: {}): an int splits
    the parameters that require grad, in param_groups order, into that many
    consecutive groups; a list gives the groups, each parameter not in any of
    them in a group of its own."""
    if groups is None:
        return {}
    p_list = [p for group in param_groups for p in group["params"] if p.requires_grad]
    if isinstance(groups, list):
        ids = {id(p) for p in p_list}
        formed: List[Sequence[Any]] = [[p for p in group if id(p) in ids] for group in groups]
        grouped = {id(p) for group in formed for p in group}
        formed += [[p] for p in p_list if id(p) not in grouped]
    else:
        formed = split_list(p_list, groups)
    return {p: tuple(group) for group in formed if group for p in group}


def register_grad_hooks(opt: Any, allocate_grads: bool) -> None:
    """Hooks opt._make_hook(p) onto the gradient accumulator of every
    parameter that requires a gradient (Horovod's way: through
    p.expand_as(p)'s grad_fn); allocate_grads: first give p a zero gradient."""
    for group in opt.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                if allocate_grads:
                    p.grad = p.data.new(p.size()).zero_()
                opt._requires_update.add(p)
                p_tmp = p.expand_as(p)
                grad_acc = p_tmp.grad_fn.next_functions[0][0]
                grad_acc.register_hook(opt._make_hook(p))
                opt._grad_accs.append(grad_acc)


def construction_index(process_set: Optional[object]) -> int:
    """How many distributed optimizers this process built over `process_set`
    before this one (their gradient names differ by it: "#k")."""
    ps_id = process_sets.process_set_id(process_set)
    with _constructed_lock:
        index = _constructed.get(ps_id, 0)
        _constructed[ps_id] = index + 1
    return index

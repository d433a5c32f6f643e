#!/usr/bin/python3
"""ZeRO-1-style sharded optimizer over tutti process sets.

    tuttirun -np 4 /usr/bin/python3 examples/torch_zero_sharded.py --steps 50
    tuttirun -np 4 /usr/bin/python3 examples/torch_zero_sharded.py --check

The ranks form two data-parallel groups, the even and the odd ranks (one group
of every rank with -np 1), each a tutti.ProcessSet training its own model
replica (here: two learning rates of one small regression model, as two
experiments sharing a job). Within a group, the optimizer state is sharded
(ZeRO stage 1, Rajbhandari et al., "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", SC 2020): every member holds the Adam
moments of its contiguous 1/n slice of the flattened parameters only. A step
is

  1. reducescatter (op=Average) of the flattened gradient over the group:
     member i receives the group's average gradient for its slice
     (tutti's reducescatter gives rank i rows d // n, plus one for the first
     d % n ranks, the slicing below follows it);
  2. the wrapped optimizer (torch.optim.Adam) steps that slice;
  3. allgather of the updated slices over the group: every member has the
     whole updated model again.

The two groups run their collectives at the same time, under the same tensor
names, each within its own set. --check also trains each group's model with
tutti.torch.DistributedOptimizer(process_set=group) on the same batches and
fails unless both reach the same parameters (the test suite runs it).
"""

import argparse
import sys

import torch

import tutti.torch as hvd


class ShardedOptimizer:
    """ZeRO-1 over `process_set`: optimizer state for this member's slice only.

    params: the model's parameters (every member of the set holds the same
    values, e.g. after broadcast_parameters); make_optimizer: a function of a
    list of tensors returning a torch optimizer (it sees one flat tensor, the
    slice). Every member calls step() at the same points. Float parameters
    of one dtype; CPU tensors. Errors: tutti's (ValueError for a rank outside
    the set)."""

    def __init__(self, params, make_optimizer, process_set, name="zero"):
        self.params = [p for p in params if p.requires_grad]
        self.process_set = process_set
        self.name = name
        total = sum(p.numel() for p in self.params)
        n, i = process_set.size(), process_set.rank()
        rows, extra = divmod(total, n)
        self.begin = i * rows + min(i, extra)
        self.end = self.begin + rows + (1 if i < extra else 0)
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.shard = flat[self.begin:self.end].clone().requires_grad_()
        self.optimizer = make_optimizer([self.shard])

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(),
                                                                             dtype=p.dtype)
                 for p in self.params]
        self.shard.grad = hvd.reducescatter(torch.cat(grads), op=hvd.Average,
                                            name=self.name + ".grad",
                                            process_set=self.process_set)
        self.optimizer.step()
        flat = hvd.allgather(self.shard.detach(), name=self.name + ".params",
                             process_set=self.process_set)
        with torch.no_grad():
            offset = 0
            for p in self.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))


def batch(step, rank):
    """This rank's batch of step `step`: a fixed random regression problem."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 12, generator=g)
    w = torch.linspace(-1.0, 1.0, 36).view(12, 3)
    return x, torch.sin(x @ w)


def groups():
    """[(set, lr)] registered on every rank: even and odd ranks (or every rank)."""
    if hvd.size() == 1:
        return [(hvd.global_process_set, 0.01)]
    even = hvd.add_process_set(range(0, hvd.size(), 2))
    odd = hvd.add_process_set(range(1, hvd.size(), 2))
    return [(even, 0.01), (odd, 0.003)]


def train(steps, process_set, lr, sharded):
    """Trains this rank's group's model; returns (model, last loss)."""
    model = make_model(seed=7)
    hvd.broadcast_parameters(model.state_dict(), root_rank=process_set.ranks[0],
                             process_set=process_set)
    if sharded:
        opt = ShardedOptimizer(model.parameters(), lambda ps: torch.optim.Adam(ps, lr=lr),
                               process_set)
    else:
        opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=lr),
                                       named_parameters=model.named_parameters(),
                                       process_set=process_set)
    loss = None
    for step in range(steps):
        x, y = batch(step, hvd.rank())
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return model, float(loss)


def run(steps=20, check=False, verbose=True):
    """Registers the groups, trains this rank's, removes the groups. With
    check, returns the largest parameter difference against
    DistributedOptimizer (raises AssertionError when above 1e-5)."""
    registered = groups()
    try:
        mine = [(ps, lr) for ps, lr in registered if ps.included()][0]
        model, loss = train(steps, *mine, sharded=True)
        if verbose:
            print("rank %d: group %s lr %g, loss after %d steps %.5f"
                  % (hvd.rank(), mine[0].ranks, mine[1], steps, loss), flush=True)
        if not check:
            return None
        reference, _ = train(steps, *mine, sharded=False)
        diff = max(float((a - b).abs().max()) for a, b in zip(model.parameters(),
                                                                reference.parameters()))
        assert diff < 1e-5, "sharded and DistributedOptimizer parameters differ by %g" % diff
        if verbose:
            print("rank %d: ZeRO-1 matches DistributedOptimizer (max difference %.2g)"
                  % (hvd.rank(), diff), flush=True)
        return diff
    finally:
        for ps, _ in registered:
            hvd.remove_process_set(ps)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--check", action="store_true",
                   help="also train with DistributedOptimizer and compare the parameters")
    args = p.parse_args()
    hvd.init()
    run(args.steps, args.check)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

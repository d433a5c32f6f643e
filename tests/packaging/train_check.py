"""A few steps of data-parallel training with tutti.torch as Horovod, for the
packaging tests (an installed wheel or Debian package, no TUTTI_LIBRARY, no
PYTHONPATH). Each rank trains on its own data; DistributedOptimizer averages
the gradients, so the parameters must end equal on every rank; the loss must
decrease. Prints "rank R: library PATH", "rank R: loss A -> B" and
"rank R: parameters <sum of squares, 12 digits>".
"""

import sys

import torch

from tutti import _library
import tutti.torch as hvd


def main():
    hvd.init()
    torch.manual_seed(1234 + hvd.rank())  # different data and start on each rank
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True) * 0.5
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    squares = sum(float((p.detach().double() ** 2).sum()) for p in model.parameters())
    lib = _library.load()._name
    print("rank %d: library %s" % (hvd.rank(), lib), flush=True)
    print("rank %d: loss %.6f -> %.6f" % (hvd.rank(), losses[0], losses[-1]), flush=True)
    print("rank %d: parameters %.12f" % (hvd.rank(), squares), flush=True)
    hvd.shutdown()
    if not losses[-1] < losses[0]:
        sys.exit("FAIL: the loss did not decrease on rank %d" % hvd.rank())


if __name__ == "__main__":
    main()

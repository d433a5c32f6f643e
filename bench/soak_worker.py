"""One rank of bench/soak: the ResNet-50 gradient set and the main job's model
(examples/torch_fashion_mnist.py's Net on random batches, through
DistributedOptimizer) for --steps steps, then one line with this process's
resident memory and open file descriptors after the warm-up and at the end:

    soak rank R steps S warmup W seconds T rss_kb A B fds C D wrong E

Run by bench/soak under tuttirun (fusion, the response cache and the job's
TUTTI_COMPRESSION as tuttirun set them). Every step the 161 gradients are
refilled with rank + 1 and allreduced (sum) asynchronously in backward
order; every 50th step every element is checked against size (size + 1) / 2
(exact in float16 and bfloat16 for size <= 16); `wrong` counts the tensors
that differed. --ordered: the gradient set's allreduces go through the
ordered lane (issued in the same order on every rank) instead of by name.
"""
import argparse
import contextlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import bench_common  # noqa: E402
import torch  # noqa: E402
import tutti.torch as hvd  # noqa: E402
from tutti.torch import _core  # noqa: E402
from torch_fashion_mnist import Net  # noqa: E402


def usage():
    """(resident kB, open fds) of this process, from /proc."""
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/self/fd"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--ordered", action="store_true")
    args = ap.parse_args()
    lane = _core.ordered_lane if args.ordered else contextlib.nullcontext
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    grads = [torch.empty(shape) for shape in bench_common.resnet50_shapes()]
    expected = size * (size + 1) / 2
    torch.manual_seed(rank)
    model = Net()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(), op=hvd.Average)
    start = None
    wrong = 0
    t0 = time.monotonic()
    for step in range(args.steps):
        if step == args.warmup:
            start = usage()
        for g in grads:
            g.fill_(rank + 1)
        with lane():
            handles = [hvd.allreduce_async_(grads[i], name="rn50.%d" % i, op=hvd.Sum)
                       for i in reversed(range(len(grads)))]
        for h in handles:
            hvd.synchronize(h)
        if step % 50 == 0:
            wrong += sum(1 for g in grads if not bool((g == expected).all()))
        x = torch.randn(16, 1, 28, 28)
        y = torch.randint(0, 10, (16,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    # Measured before the closing barrier: once any rank shuts down after it,
    # the job's connections close, and a rank measuring then would count fewer
    # fds than it used.
    end = usage()
    hvd.barrier()
    if start is None:
        start = end
    print("soak rank %d steps %d warmup %d seconds %.1f rss_kb %d %d fds %d %d wrong %d" %
          (rank, args.steps, args.warmup, time.monotonic() - t0, start[0], end[0], start[1],
           end[1], wrong), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()

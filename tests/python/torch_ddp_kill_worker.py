#!/usr/bin/python3
"""One rank of the peer-loss job (torch_distributed_jobs.py kill): DDP on
backend "tutti"; the last rank SIGKILLs itself in the middle of step 3's
backward pass (after its first gradient bucket was launched). Every other
rank must get an error, not hang: it prints

    rank R: error at <unix time> after <s> s in step <n>: <message>

and exits 0 (3 if training finished without an error)."""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import tutti.torch.distributed  # noqa: F401 (registers "tutti"; joins under TUTTI_*)

KILL_STEP = 3


def main():
    dist.init_process_group("tutti")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 8))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    victim = rank == size - 1
    step = 0

    def die(grad):  # on the first layer's gradient: late in backward
        if victim and step == KILL_STEP:
            print("rank %d: killing myself at %.3f" % (rank, time.time()), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return grad

    model[0].weight.register_hook(die)
    start = time.time()
    try:
        for step in range(1, 50):
            start = time.time()
            opt.zero_grad()
            ddp(torch.randn(16, 64)).square().mean().backward()
            opt.step()
    except Exception as e:  # noqa: BLE001 (any error is what we wait for)
        now = time.time()
        print("rank %d: error at %.3f after %.3f s in step %d: %s"
              % (rank, now, now - start, step, str(e).splitlines()[0][:300]), flush=True)
        os._exit(0)
    print("rank %d: finished without an error" % rank, flush=True)
    os._exit(3)


if __name__ == "__main__":
    sys.exit(main())

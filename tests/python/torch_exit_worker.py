"""One short torch.distributed job on backend "tutti" that ends one of several
ways (torch_distributed_jobs.py exits runs it many times under torchrun and
fails on any abort): every kind of thread tutti and its Python side start is
running when the interpreter exits (the background thread, completion
threads with ops just completed, a DDP model's reducer, a subgroup).

    torch_exit_worker.py MODE     MODE: plain | destroy | hvd-shutdown | sys-exit
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import tutti.torch as hvd
import tutti.torch.distributed  # noqa: F401 (registers "tutti")
from tutti.errors import ShutdownError


def main(mode):
    dist.init_process_group("tutti")
    rank, size = dist.get_rank(), dist.get_world_size()
    sub = dist.new_group([0])
    t = torch.full((4,), float(rank))
    works = [dist.all_reduce(t.clone(), async_op=True) for _ in range(4)]
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    ddp(torch.randn(3, 4)).sum().backward()
    for w in works:
        w.wait()
    if rank == 0:
        dist.all_reduce(torch.ones(1), group=sub)
    dist.barrier()
    print("rank %d/%d: done, exit mode %s" % (rank, size, mode), flush=True)
    if mode == "destroy":
        dist.destroy_process_group()
    elif mode == "hvd-shutdown":
        hvd.shutdown()
    elif mode == "sys-exit":
        try:  # in flight at exit on some ranks
            dist.all_reduce(torch.ones(1), async_op=True)
        except ShutdownError:
            pass  # the other rank exited first: its shutdown ended the job (tutti's rule)
        sys.exit(0)


if __name__ == "__main__":
    main(sys.argv[1])

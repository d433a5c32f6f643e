"""One task of `srun -n N`: checks that tutti's placement is Slurm's, then an
allreduce, an allgather and a broadcast against values computed here.

Prints "slurm task R/N OK local L/LS cross C/CS rendezvous HOST:PORT".
Exits non-zero with a message saying what was wrong.
"""

import os
import sys

import torch

import tutti.torch as hvd


def expect(what, got, want):
    if got != want:
        sys.exit("FAIL: %s = %r, expected %r" % (what, got, want))


def main():
    hvd.init()
    env = os.environ
    under_srun = "SLURM_STEP_ID" in env and "TUTTI_RANK" not in env
    if under_srun:
        expect("rank", hvd.rank(), int(env["SLURM_PROCID"]))
        expect("size", hvd.size(), int(env["SLURM_NTASKS"]))
        expect("local_rank", hvd.local_rank(), int(env["SLURM_LOCALID"]))
        expect("cross_rank", hvd.cross_rank(), int(env["SLURM_NODEID"]))
        expect("cross_size", hvd.cross_size(), int(env["SLURM_NNODES"]))
    want_size = int(sys.argv[1]) if len(sys.argv) > 1 else hvd.size()
    expect("size", hvd.size(), want_size)
    n, r = hvd.size(), hvd.rank()
    total = hvd.allreduce(torch.tensor([float(r + 1)] * 3), op=hvd.Sum, name="sum")
    expect("allreduce", total.tolist(), [n * (n + 1) / 2.0] * 3)
    gathered = hvd.allgather(torch.tensor([[r, r * r]]), name="gather")
    expect("allgather", gathered.tolist(), [[i, i * i] for i in range(n)])
    value = torch.tensor([7.5]) if r == n - 1 else torch.zeros(1)
    expect("broadcast", hvd.broadcast(value, root_rank=n - 1, name="bcast").tolist(), [7.5])
    print("slurm task %d/%d OK local %d/%d cross %d/%d under_srun=%d"
          % (r, n, hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),
             int(under_srun)), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Horovod (horovod.torch over its MPI backend): float32 sum allreduce sweep
(hvd.allreduce_ in place, one named op at a time), or with --gradient-set
ResNet-50's gradients per step as 161 hvd.allreduce_async_ then
hvd.synchronize on each, as Horovod's DistributedOptimizer does. Fusion is
Horovod's own setting (HOROVOD_FUSION_THRESHOLD; 0 = off); the row is named
after it. Same flags and table as tutti-bench (bench_common.py).

  mpirun -np 2 python horovod_allreduce.py -b 4 -e 1M -f 4
  HOROVOD_FUSION_THRESHOLD=0 mpirun -np 2 -x HOROVOD_FUSION_THRESHOLD \\
      python horovod_allreduce.py --gradient-set -n 10 -w 2
"""

import os
import sys

import horovod
import horovod.torch as hvd
import torch

import bench_common


class Horovod(bench_common.TorchLibrary):
    def __init__(self):
        super().__init__()
        self.rank, self.size = hvd.rank(), hvd.size()

    def allreduce(self, tensor, name):
        hvd.allreduce_(tensor, op=hvd.Sum, name=name)

    def reduce_doubles(self, values, op):
        t = torch.tensor(values, dtype=torch.float64)
        return hvd.allreduce(t, op=hvd.Max if op == "max" else hvd.Sum,
                             name=f"bench.{op}.{len(values)}").tolist()

    def barrier(self):
        hvd.barrier()


def fusion_name():
    value = os.environ.get("HOROVOD_FUSION_THRESHOLD")
    if value is None:
        return "horovod-fusion-default"
    value = int(value)
    if value == 0:
        return "horovod-fusion-off"
    return f"horovod-fusion-{value >> 20}MiB" if value % (1 << 20) == 0 else f"horovod-fusion-{value}B"


def main():
    args = bench_common.sweep_parser(__doc__).parse_args()
    hvd.init()
    lib = Horovod()
    details = (f"horovod {horovod.__version__} (MPI built: {hvd.mpi_built()}, "
               f"gloo built: {hvd.gloo_built()}), torch {torch.__version__}")
    if args.gradient_set:
        if lib.rank == 0:
            bench_common.print_step_header("horovod_allreduce", lib.size, details)
        grads = lib.gradients()

        def step(tensors):
            handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=f"grad.{i}")
                       for i, t in reversed(list(enumerate(tensors)))]
            for h in handles:
                hvd.synchronize(h)

        wrong = bench_common.run_gradient_set(args, lib, fusion_name(), grads, step)
    else:
        if lib.rank == 0:
            bench_common.print_header("horovod_allreduce", lib.size, details)
        wrong = bench_common.run_sweep(args, lib)
    hvd.shutdown()
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()

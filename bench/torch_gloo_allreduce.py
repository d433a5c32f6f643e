#!/usr/bin/python3
"""PyTorch's torch.distributed with the gloo backend: float32 sum allreduce
sweep, or with --gradient-set ResNet-50's gradients per step as one flat
buffer (torch-gloo-flat) and as 161 sequential all_reduce calls
(torch-gloo-per-tensor). Same flags and table as tutti-bench (bench_common.py).
all_reduce is in place. Start one process per rank:

  for r in 0 1; do /usr/bin/python3 torch_gloo_allreduce.py --rank $r --size 2 \\
      --init tcp://127.0.0.1:29610 -b 4 -e 1M -f 4 & done; wait
"""

import sys

import torch
import torch.distributed as dist

import bench_common


class TorchGloo(bench_common.TorchLibrary):
    def __init__(self, rank, size):
        super().__init__()
        self.rank, self.size = rank, size

    def allreduce(self, tensor, name):
        dist.all_reduce(tensor)

    def reduce_doubles(self, values, op):
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return t.tolist()

    def barrier(self):
        dist.barrier()


def main():
    p = bench_common.sweep_parser(__doc__)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--init", required=True, help="init_method, e.g. tcp://127.0.0.1:29610")
    args = p.parse_args()
    dist.init_process_group("gloo", init_method=args.init, rank=args.rank, world_size=args.size)
    lib = TorchGloo(args.rank, args.size)
    details = f"torch {torch.__version__} torch.distributed gloo, {torch.get_num_threads()} threads"
    if args.gradient_set:
        if lib.rank == 0:
            bench_common.print_step_header("torch_gloo_allreduce", lib.size, details)
        grads = lib.gradients()
        flat = [torch.empty(sum(g.numel() for g in grads), dtype=torch.float32)]
        wrong = bench_common.run_gradient_set(args, lib, "torch-gloo-flat", flat,
                                              lambda ts: dist.all_reduce(ts[0]))
        wrong += bench_common.run_gradient_set(
            args, lib, "torch-gloo-per-tensor", grads,
            lambda ts: [dist.all_reduce(t) for t in reversed(ts)])
    else:
        if lib.rank == 0:
            bench_common.print_header("torch_gloo_allreduce", lib.size, details)
        wrong = bench_common.run_sweep(args, lib)
    dist.destroy_process_group()
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()

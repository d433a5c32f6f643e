#!/usr/bin/python3
"""torch.distributed ops on backend "tutti" against "gloo", in the same
processes, as a PyTorch user calls them: dist.all_reduce(t, group=g) and so
on, blocking, one op at a time. Both groups span every rank; one of them is
the default group (--default), the other comes from dist.new_group. For each
op and size the two backends take turns (--rounds rounds of -n ops each, the
order alternating), and a row gives each backend's median µs per op over
its rounds and the ratio tutti / gloo (below 1: tutti is faster). Results
are checked against values computed here (#wrong counts bad elements).

  tuttirun -np 2 /usr/bin/python3 bench/torch_dist_ops.py -b 4 -e 64M -f 16
  tuttirun -np 4 build/torch2-venv/bin/python bench/torch_dist_ops.py --default gloo

Ops: all_reduce (sum), all_gather (a list), all_gather_into_tensor,
broadcast (from rank 0), reduce_scatter_tensor (sum); sizes are bytes per
rank's input (all_gather*: each rank's part; reduce_scatter_tensor: each
rank's output). Wall times on a shared machine: read the ratios.
"""

import statistics
import time

import bench_common
import torch
import torch.distributed as dist

import tutti.torch.distributed  # noqa: F401 (registers backend "tutti")

OPS = ["all_reduce", "all_gather", "all_gather_into_tensor", "broadcast",
       "reduce_scatter_tensor"]


def make_op(name, nbytes, rank, size, group):
    """(run(), check() -> wrong elements) for one op of `nbytes` per rank."""
    n = max(1, nbytes // 4)
    x = torch.full((n,), float(rank + 1))
    if name == "all_reduce":
        t = x.clone()

        def run():
            t.copy_(x)
            dist.all_reduce(t, group=group)
        return run, lambda: int((t != size * (size + 1) / 2).sum())
    if name == "all_gather":
        outs = [torch.empty(n) for _ in range(size)]
        return (lambda: dist.all_gather(outs, x, group=group),
                lambda: sum(int((o != r + 1).sum()) for r, o in enumerate(outs)))
    if name == "all_gather_into_tensor":
        out = torch.empty(n * size)
        want = torch.arange(1, size + 1, dtype=torch.float32).repeat_interleave(n)
        return (lambda: dist.all_gather_into_tensor(out, x, group=group),
                lambda: int((out != want).sum()))
    if name == "broadcast":
        t = x.clone()

        def run():
            t.fill_(float(rank + 1))
            dist.broadcast(t, 0, group=group)
        return run, lambda: int((t != 1).sum())
    inp = torch.full((n * size,), float(rank + 1))
    out = torch.empty(n)
    return (lambda: dist.reduce_scatter_tensor(out, inp, group=group),
            lambda: int((out != size * (size + 1) / 2).sum()))


def time_rounds(run, iters):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run()
    return (time.perf_counter() - start) / iters


def slowest(seconds, group):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def measure(args, name, nbytes, groups):
    rank, size = dist.get_rank(), dist.get_world_size()
    iters = bench_common.iterations(args, nbytes)
    ops = {b: make_op(name, nbytes, rank, size, g) for b, g in groups.items()}
    for b, (run, _) in list(ops.items()):
        try:
            run()
        except RuntimeError as e:  # torch 1.13's gloo has no _allgather_base, reduce_scatter
            if "support" not in str(e):
                raise
            del ops[b]
            continue
        for _ in range(bench_common.warmups(args, nbytes)):
            run()
    times = {b: [] for b in ops}
    for k in range(args.rounds):
        order = list(ops) if k % 2 == 0 else list(reversed(list(ops)))
        for b in order:
            times[b].append(slowest(time_rounds(ops[b][0], iters), groups["gloo"]))
    wrong = sum(check() for _, check in ops.values())
    return {b: statistics.median(v) for b, v in times.items()}, wrong


def main():
    p = bench_common.sweep_parser(__doc__)
    p.set_defaults(b=4, e=64 << 20, f=16, n=50, w=5, m=64 << 20)
    p.add_argument("--default", choices=["tutti", "gloo"], default="tutti",
                   help="the default group's backend (the other is a new_group)")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per point")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of: " +
                   ", ".join(OPS))
    args = p.parse_args()
    other = "gloo" if args.default == "tutti" else "tutti"
    dist.init_process_group(args.default)
    size = dist.get_world_size()
    groups = {args.default: dist.group.WORLD,
              other: dist.new_group(list(range(size)), backend=other)}
    groups = {"gloo": groups["gloo"], "tutti": groups["tutti"]}
    if dist.get_rank() == 0:
        print("# torch_dist_ops: %d ranks, torch %s, default group %s; median us per op over %d "
              "alternating rounds" % (size, torch.__version__, args.default, args.rounds))
        print("# %-22s %12s %12s %12s %8s %7s" % ("op", "size(B)", "gloo(us)", "tutti(us)",
                                                   "tutti/gloo", "#wrong"))
    total_wrong = 0
    for name in args.ops.split(","):
        for nbytes in bench_common.sizes(args):
            med, wrong = measure(args, name, nbytes, groups)
            total_wrong += wrong
            if dist.get_rank() == 0:
                gloo = med.get("gloo")
                print("  %-22s %12d %12s %12.1f %8s %7d" % (
                    name, nbytes, "%.1f" % (gloo * 1e6) if gloo else "n/a", med["tutti"] * 1e6,
                    "%.2f" % (med["tutti"] / gloo) if gloo else "n/a", wrong), flush=True)
    dist.destroy_process_group()
    raise SystemExit(1 if total_wrong else 0)


if __name__ == "__main__":
    main()

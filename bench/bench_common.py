"""Shared parts of the Python benchmark programs (torch_gloo_allreduce.py,
horovod_allreduce.py): the Python twin of bench_util.h. Same flags, same
iteration rule, same table and "gradset" rows, so bench/compare parses every
program alike. Keep the two in step.

A program supplies, per library, a way to run one allreduce of a float32 tensor
and reductions of the per-iteration times over ranks; this module owns the
sweep, the timing, the check and the printing."""

import argparse
import os
import re
import statistics
import sys
import time

MIN_ITERATIONS = 5
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    """'4', '64K', '1M', '2G' (binary) -> bytes."""
    m = re.fullmatch(r"(\d+)([KMG]?)(i?B)?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size like 4, 64K, 1M, 2G: {text}")
    return int(m.group(1)) * _SUFFIXES[m.group(2).upper()]


def sweep_parser(description):
    """argparse with bench_util.h's sweep flags (-b -e -f -n -w -c -m)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("-b", type=parse_size, default=32 << 20, help="smallest size")
    p.add_argument("-e", type=parse_size, default=32 << 20, help="largest size")
    p.add_argument("-f", type=int, default=2, help="size multiplication factor")
    p.add_argument("-n", type=int, default=20, help="timed iterations (steps)")
    p.add_argument("-w", type=int, default=5, help="untimed iterations (steps)")
    p.add_argument("-c", type=int, default=1, choices=[0, 1], help="check the results")
    p.add_argument("-m", type=parse_size, default=0,
                   help="cap big sizes at max(5, m / size) iterations (0: no cap)")
    p.add_argument("--gradient-set", action="store_true",
                   help="ResNet-50's 161 gradients per step instead of the sweep")
    return p


def _capped(args, nbytes, wanted, floor):
    if args.m <= 0 or nbytes <= 0:
        return wanted
    return min(wanted, max(floor, args.m // nbytes))


def iterations(args, nbytes):
    return _capped(args, nbytes, args.n, min(args.n, MIN_ITERATIONS))


def warmups(args, nbytes):
    return _capped(args, nbytes, args.w, min(args.w, 1))


def sizes(args):
    size = args.b
    while size <= args.e:
        yield size
        size *= args.f


def print_header(program, ranks, details):
    print(f"# {program}: {ranks} ranks, {details}")
    print("# time: median over iterations of the slowest rank; busbw: nccl-tests definitions")
    print("#%13s %12s %9s %8s %14s %12s %12s %12s %8s" % (
        "size(B)", "count", "dtype", "redop", "op", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
        "#wrong"), flush=True)


def print_row(nbytes, count, ranks, seconds, wrong):
    algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    busbw = algbw * 2.0 * (ranks - 1) / ranks
    print("%14d %12d %9s %8s %14s %12.2f %12.4f %12.4f %8d" % (
        nbytes, count, "float32", "sum", "allreduce", seconds * 1e6, algbw, busbw, wrong),
        flush=True)


def print_step_header(program, ranks, details):
    print(f"# {program}: {ranks} ranks, {details}")
    print("# step: one step's gradients allreduced; slowest rank; median/min/max over steps")
    print("#%6s %24s %8s %12s %12s %12s %12s" % (
        "", "strategy", "tensors", "bytes", "median(ms)", "min(ms)", "max(ms)"), flush=True)


def print_step(strategy, tensors, nbytes, seconds):
    print("gradset %24s %8d %12d %12.3f %12.3f %12.3f" % (
        strategy, tensors, nbytes, statistics.median(seconds) * 1e3, min(seconds) * 1e3,
        max(seconds) * 1e3), flush=True)


def run_sweep(args, lib):
    """Float32 sum allreduce sweep. `lib` has: rank, size, make_tensor(count)
    (filled with i % 7 + rank + 1), allreduce(tensor, name), max_over_ranks(list),
    sum_over_ranks(int). Returns the number of wrong elements over all ranks."""
    total_wrong = 0
    for asked in sizes(args):
        count = max(1, asked // 4)
        nbytes = count * 4
        name = f"bench.allreduce.{nbytes}"
        tensor = lib.make_tensor(count)
        n = iterations(args, nbytes)
        for _ in range(warmups(args, nbytes)):
            lib.allreduce(tensor, name)
        seconds = []
        for _ in range(n):
            start = time.perf_counter()
            lib.allreduce(tensor, name)
            seconds.append(time.perf_counter() - start)
        wrong = 0
        if args.c:
            tensor = lib.make_tensor(count)
            lib.allreduce(tensor, name)
            expected = lib.make_expected(count)
            wrong = lib.sum_over_ranks(lib.count_different(tensor, expected))
            total_wrong += wrong
        seconds = lib.max_over_ranks(seconds)
        if lib.rank == 0:
            print_row(nbytes, count, lib.size, statistics.median(seconds), wrong if args.c else -1)
    return total_wrong


def resnet50_shapes():
    """The 161 shapes of bench/resnet50_shapes.h, in its order."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resnet50_shapes.h")
    shapes = []
    with open(path) as f:
        for m in re.finditer(r'\{"[^"]+", (\d), \{(\d+), (\d+), (\d+), (\d+)\}\}', f.read()):
            ndim = int(m.group(1))
            shapes.append([int(m.group(i)) for i in range(2, 2 + ndim)])
    total = sum(_product(s) for s in shapes)
    if len(shapes) != 161 or total != 25557032:
        sys.exit(f"resnet50_shapes.h: read {len(shapes)} tensors, {total} parameters")
    return shapes


def _product(shape):
    p = 1
    for d in shape:
        p *= d
    return p


def run_gradient_set(args, lib, strategy, tensors, step):
    """Times `step(tensors)` (allreduce every tensor in place) per step. Per
    step, untimed: refill with rank + 1, barrier, and with -c 1 a check that
    every element is size (size + 1) / 2. `lib` as in run_sweep plus
    fill(tensors, value), barrier(), count_not_equal(tensors, value)."""
    expected = lib.size * (lib.size + 1) / 2
    seconds = []
    wrong = 0
    for s in range(-args.w, args.n):
        lib.fill(tensors, lib.rank + 1)
        lib.barrier()
        start = time.perf_counter()
        step(tensors)
        elapsed = time.perf_counter() - start
        if s >= 0:
            seconds.append(elapsed)
        if args.c:
            wrong += lib.count_not_equal(tensors, expected)
    seconds = lib.max_over_ranks(seconds)
    wrong = lib.sum_over_ranks(wrong)
    if lib.rank == 0:
        print_step(strategy, len(tensors), sum(t.numel() for t in tensors) * 4, seconds)
    return wrong


class TorchLibrary:
    """The tensor side of run_sweep/run_gradient_set for torch-based libraries.
    A subclass sets rank and size and implements allreduce(tensor, name),
    reduce_doubles(values, op) with op "max" or "sum", and barrier()."""

    rank = 0
    size = 1

    def __init__(self):
        import torch  # imported here: bench_common itself needs no torch
        self.torch = torch

    def make_tensor(self, count):
        return (self.torch.arange(count) % 7 + self.rank + 1).float()

    def make_expected(self, count):
        n = self.size
        return (n * (self.torch.arange(count) % 7 + 1) + n * (n - 1) // 2).float()

    def count_different(self, tensor, expected):
        return int((tensor != expected).sum())

    def max_over_ranks(self, values):
        return self.reduce_doubles(values, "max")

    def sum_over_ranks(self, value):
        return int(self.reduce_doubles([value], "sum")[0])

    def fill(self, tensors, value):
        for t in tensors:
            t.fill_(value)

    def count_not_equal(self, tensors, value):
        return sum(int((t != value).sum()) for t in tensors)

    def gradients(self):
        """ResNet-50's 161 gradients, float32."""
        return [self.torch.empty(s, dtype=self.torch.float32) for s in resnet50_shapes()]

#!/usr/bin/python3
"""Lightning on backend "tutti" (torch 2.x): examples/lightning_fashion_mnist.py
for a few steps at --np ranks, started both ways (ctest calls this;
tests/python/lightning.cmake).

    lightning_jobs.py --tuttirun T --library L [--python build/torch2-venv/bin/python]

Jobs: DDPStrategy under tuttirun; DDPStrategy started as a plain `python`
process (Lightning's launcher starts the other ranks, tutti joins through
torch's store); ModelParallelStrategy's FSDP2 the same way; and, as the
reference computed without tutti, DDPStrategy on gloo. Each must exit 0 with
no "terminate called" in its output; every rank must print its line, with the
mean loss of the last 10 steps below that of the first 10 and the same
parameter checksum as every other rank of every job (at 2 ranks the gradient
average is one addition, so tutti and gloo agree to the bit; at more ranks
the parameter sums must agree to 1e-5 relative); the test accuracies of the
jobs must equal the reference's (within 1 point at more ranks) and exceed 50 %.
Exits 77 (skipped) when the interpreter is missing, 1 with a message saying
what was wrong otherwise.
"""

import argparse
import os
import re
import sys

from run_job_tests import run  # same directory: the job runner with a deadline

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(REPO, "examples", "lightning_fashion_mnist.py")
VENV = os.environ.get("TUTTI_TORCH2_VENV", os.path.join(REPO, "build", "torch2-venv"))
LINE = re.compile(r"rank (\d+) of (\d+) \(backend (\w+), (\w+)\): train loss first 10 steps "
                  r"([0-9.]+), last 10 steps ([0-9.]+), (\d+) steps; parameter checksum (\w+) "
                  r"\(sum (\S+)\)")
ACCURACY = re.compile(r"test accuracy ([0-9.]+)%")
STEPS = 30


def job_env(args):
    env = dict(os.environ)
    env["TUTTI_LIBRARY"] = os.path.abspath(args.library)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "bindings", "python"),
                                         os.path.join(REPO, "examples")])
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("TUTTI_TIMEOUT_SECONDS", "60")
    for var in [v for v in env if v.startswith(("TUTTI_RANK", "TUTTI_SIZE", "MASTER_", "RANK",
                                                "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD"))]:
        del env[var]
    return env


def check_job(name, rc, out, np_):
    """The job's rows [(rank, checksum, sum)] and accuracy; raises SystemExit."""
    fail = "FAIL: %s: " % name
    if rc != 0:
        sys.exit(fail + "exit code %d" % rc)
    if "terminate called" in out:
        sys.exit(fail + "'terminate called' in the output (a rank aborted at exit)")
    rows = [m.groups() for m in LINE.finditer(out)]
    if sorted(int(r[0]) for r in rows) != list(range(np_)):
        sys.exit(fail + "ranks that printed their result: %s (expected 0..%d)"
                 % (sorted(r[0] for r in rows), np_ - 1))
    for rank, size, _, _, first, last, steps, _, _ in rows:
        if int(size) != np_ or int(steps) != STEPS:
            sys.exit(fail + "rank %s ran %s steps of %s ranks (expected %d of %d)"
                     % (rank, steps, size, STEPS, np_))
        if not float(last) < float(first):
            sys.exit(fail + "rank %s: loss did not decrease (first 10 steps %s, last 10 %s)"
                     % (rank, first, last))
    accuracy = ACCURACY.findall(out)
    if len(accuracy) != 1 or float(accuracy[0]) <= 50.0:
        sys.exit(fail + "test accuracy %s (expected one line, above 50%%)" % accuracy)
    print("%s: passed (checksum %s, accuracy %s%%)" % (name, rows[0][7], accuracy[0]), flush=True)
    return [(r[7], float(r[8])) for r in rows], accuracy[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=os.path.join(VENV, "bin", "python"),
                   help="interpreter with torch 2.x and lightning (default: %(default)s)")
    p.add_argument("--tuttirun", required=True)
    p.add_argument("--library", required=True, help="libtutti.so (TUTTI_LIBRARY)")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--timeout", type=int, default=180, help="seconds per job")
    args = p.parse_args()
    if not os.path.exists(args.python):
        print("SKIP: %s is missing (scripts/install-deps --torch2 makes it)" % args.python)
        return 77
    example = [args.python, EXAMPLE, "--max-steps", str(STEPS), "--test-batches", "2"]
    jobs = [("DDP under tuttirun",
             [args.tuttirun, "-np", str(args.np)] + example),
            ("DDP, Lightning's launcher", example + ["--devices", str(args.np)]),
            ("FSDP2, Lightning's launcher", example + ["--devices", str(args.np),
                                                      "--strategy", "fsdp2"]),
            ("DDP on gloo (reference), Lightning's launcher",
             example + ["--devices", str(args.np), "--backend", "gloo"])]
    results = {}
    for name, cmd in jobs:
        rc, out = run(cmd, job_env(args), args.timeout)
        results[name] = check_job(name, rc, out, args.np)
    rows, reference_accuracy = results[jobs[-1][0]]
    reference = rows[0]
    for name, (rows, accuracy) in results.items():
        for digest, total in rows:
            same = digest == reference[0] if args.np == 2 else (
                abs(total - reference[1]) <= 1e-5 * abs(reference[1]))
            if not same:
                sys.exit("FAIL: %s: parameters %s (sum %r) differ from the gloo reference's %s "
                         "(sum %r)" % (name, digest, total, reference[0], reference[1]))
        if (accuracy != reference_accuracy if args.np == 2
                else abs(float(accuracy) - float(reference_accuracy)) > 1.0):
            sys.exit("FAIL: %s: test accuracy %s%%, the gloo reference's %s%%"
                     % (name, accuracy, reference_accuracy))
    print("lightning: %d jobs at np %d passed, parameters equal to the gloo reference's"
          % (len(jobs), args.np))
    return 0


if __name__ == "__main__":
    sys.exit(main())

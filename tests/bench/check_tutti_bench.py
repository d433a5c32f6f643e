#!/usr/bin/python3
"""CI check of tutti-bench (issue 6): runs the given command (tuttirun ...
tutti-bench ... -c 1 --op all) and fails unless it exits 0, prints a row for
every collective, and every row's #wrong is 0. Not a timed test: the figures
are printed, never compared.

  check_tutti_bench.py -- tuttirun -np 3 tutti-bench -b 4 -e 1M -f 4 -n 3 -w 1 -c 1 --op all
"""

import re
import subprocess
import sys

OPS = ["allreduce", "allgather", "broadcast", "reducescatter", "alltoall"]
PREFIX = re.compile(r"^\[[\d,]+\]<std(out|err)>: ?")  # tuttirun's, or mpirun's --tag-output


def problems_of(returncode, output):
    """What is wrong with a tutti-bench run (exit code, output): [] when it
    exited 0, printed a row for every collective and every #wrong is 0.
    Also used by tests/cluster/cluster_tests.py."""
    problems = []
    if returncode != 0:
        problems.append(f"exit code {returncode}")
    seen = {op: 0 for op in OPS}
    for line in output.splitlines():
        fields = PREFIX.sub("", line).split()
        if len(fields) != 9 or not fields[0].isdigit():
            continue
        op, wrong = fields[4], fields[8]
        seen[op] = seen.get(op, 0) + 1
        if wrong != "0":
            problems.append(f"{op} {fields[0]} bytes: #wrong = {wrong}")
    problems += [f"no rows for {op}" for op, n in seen.items() if n == 0]
    return problems, sum(seen.values())


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit(__doc__)
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    print(proc.stdout, end="")
    problems, rows = problems_of(proc.returncode, proc.stdout)
    if problems:
        print("check_tutti_bench: FAILED: " + "; ".join(problems))
        return 1
    print(f"check_tutti_bench: OK: {rows} rows, every #wrong is 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())

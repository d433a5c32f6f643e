#!/usr/bin/env python3
"""A stand-in for an elastic tutti worker (docs/elastic.md), no tutti needed.

Joins generations through tuttirun's store with rendezvous_helper ("join"),
prints one line per generation it joins:
  joined g=<g> rank=<r> size=<n> local=<lr>/<ls> cross=<cr>/<cs> host=<host>
and then does what the options say. Exit codes: 0 done, 2 the driver gave up
(elastic/failed; "failed: <message>" printed), 1 anything else.

Joining generation g as rank r publishes elastic/gen/<g>/rank/<r>/addr, as
the tcp transport does (the driver sees from it which generation a worker
joined).

Usage: fake_elastic_worker.py --helper PATH [--fail W:CODE[:G]] [--report W:RANK:G]
                              [--done-at G] [--hold S] [--meet] [--marker TEXT]
  --fail W:CODE[:G]   worker W exits with CODE once it joined generation G (default 0)
  --report W:RANK:G   worker W, in generation G, reports rank RANK lost (and waits)
  --done-at G         exit 0 after joining generation G (after --hold seconds)
  --hold S            seconds to stay in a generation before exiting 0 (default 0.3)
  --meet              after joining, wait (up to the elastic timeout) until every member
                      of the generation published its address, as the tcp transport's
                      rendezvous does; a newer generation meanwhile: join that one
  --marker TEXT       ignored: makes the process findable with ps
"""
import argparse
import os
import subprocess
import sys
import time


def helper(args, *words):
    return subprocess.run([args.helper] + [str(w) for w in words], capture_output=True, text=True)


def failure(r, what):
    """This worker's exit code after a failed helper call `what`: 2 when the
    driver gave up (its reason printed), 1 for any other failure; None when r
    succeeded."""
    if r.returncode == 2:
        print(r.stdout.strip(), flush=True)
        return 2
    if r.returncode != 0:
        print(what + " failed: " + r.stderr.strip(), flush=True)
        return 1
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--helper", required=True)
    p.add_argument("--fail", action="append", default=[])
    p.add_argument("--report", action="append", default=[])
    p.add_argument("--done-at", type=int, default=0)
    p.add_argument("--hold", type=float, default=0.3)
    p.add_argument("--meet", action="store_true")
    p.add_argument("--marker", default="")  # only to find the process in `ps`
    args = p.parse_args()
    me = int(os.environ["TUTTI_ELASTIC_WORKER_ID"])
    # A little longer than the driver's wait for --min-np, which starts when
    # the driver sees the failure (after this worker started waiting): the
    # driver's elastic/failed should end the wait, not this worker's clock.
    timeout = float(os.environ["TUTTI_ELASTIC_TIMEOUT_SECONDS"]) + 5
    for var in ("TUTTI_RANK", "TUTTI_SIZE", "TUTTI_LOCAL_RANK", "TUTTI_CROSS_RANK"):
        if var in os.environ:
            print("unexpected %s=%s" % (var, os.environ[var]), flush=True)
            return 1
    host = os.environ.get("TUTTI_FAKE_HOST", "local")
    last = -1
    while True:
        r = helper(args, "join", last, timeout)
        code = failure(r, "join")
        if code is not None:
            return code
        lines = r.stdout.splitlines()
        g = int(lines[0])
        last = g
        mine = [l.split() for l in lines[1:] if l.split()[0] == str(me)]
        if not mine:
            continue  # not a member: wait for a later generation
        _, rank, size, lr, ls, cr, cs, member_host = mine[0]
        helper(args, "set", "elastic/gen/%d/rank/%s/addr" % (g, rank), "fake:%d" % me)
        if args.meet:
            r = helper(args, "meet", g, size, timeout - 5)
            if r.returncode == 3:
                continue  # superseded: join the newer generation
            code = failure(r, "meet")
            if code is not None:
                return code
        print("joined g=%d rank=%s size=%s local=%s/%s cross=%s/%s host=%s fake=%s"
              % (g, rank, size, lr, ls, cr, cs, member_host, host), flush=True)
        for spec in args.fail:
            w, code, *gen = spec.split(":")
            if int(w) == me and g == int(gen[0] if gen else 0):
                time.sleep(0.2)
                return int(code)
        for spec in args.report:
            w, lost, gen = spec.split(":")
            if int(w) == me and g == int(gen):
                helper(args, "set", "elastic/report/%d/%d" % (g, me), lost)
        if g >= args.done_at:
            time.sleep(args.hold)
            return 0


if __name__ == "__main__":
    sys.exit(main())

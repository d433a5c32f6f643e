#!/usr/bin/python3
"""A rank SIGSTOPped mid-allreduce under tuttirun --mpi (issue 18): the other
ranks fail after TUTTI_TIMEOUT_SECONDS naming the call, the process set and
the timeout, and the job ends (MPI_Abort) with nothing left running.

With --between the rank stops between two collectives of a tutti runtime,
while the others wait in the negotiation: they fail after the timeout
naming the stopped rank ("rank 1: nothing heard for 2 s
(TUTTI_TIMEOUT_SECONDS)", the heartbeats of ops/peer_liveness.h).

    stop_rank_test.py --tuttirun PATH --program PATH [--np 3] [--timeout 2] [--between]

The program is tests/mpi/mpi_stop_rank.cc (see its header for its lines).
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time
import uuid

ERROR = re.compile(r"error rank (\d+) after ([\d.]+) s at ([\d.]+): (.*)")
STOPPING = re.compile(r"stopping rank (\d+) at ([\d.]+)")


def job_processes(marker):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if marker.encode() in f.read():
                    out.append(int(d))
        except OSError:
            pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuttirun", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--np", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--between", action="store_true")
    args = ap.parse_args()
    marker = "stoprank" + uuid.uuid4().hex[:8]
    env = dict(os.environ, TUTTI_TIMEOUT_SECONDS=str(args.timeout), TUTTI_TEST_MARKER=marker)
    stop_rank = 1
    cmd = [args.tuttirun, "--mpi", "-np", str(args.np), "-x", "TUTTI_TEST_MARKER",
           args.program, str(stop_rank)] + (["between"] if args.between else [])
    # Start-up included: well under a minute even on a loaded machine.
    limit = 90
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        print(out)
        left = job_processes(marker)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        sys.exit("FAIL: the job still ran after %d s (%d processes)" % (limit, len(left)))
    ended = time.time()
    print(out)
    time.sleep(1)
    left = job_processes(marker)
    for pid in left:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    failures = []
    if left:
        failures.append("%d processes of the job still running 1 s after tuttirun exited" % len(left))
    if proc.returncode == 0:
        failures.append("tuttirun exited with 0 after a rank stopped")
    stops = [float(m.group(2)) for m in STOPPING.finditer(out)]
    if len(stops) != 1:
        failures.append("expected one 'stopping rank' line, found %d" % len(stops))
    errors = {int(m.group(1)): m for m in ERROR.finditer(out)}
    survivors = [r for r in range(args.np) if r != stop_rank]
    between_parts = ("rank %d: nothing heard for %g s (TUTTI_TIMEOUT_SECONDS)"
                     % (stop_rank, args.timeout), "MPI_Abort")
    for r in survivors:
        m = errors.get(r)
        if m is None:
            failures.append("rank %d printed no error" % r)
            continue
        took, message = float(m.group(2)), m.group(4)
        parts = between_parts if args.between else (
            "rank %d: MPI_Iallreduce" % r, "the global process set (ranks 0-%d)" % (args.np - 1),
            "made no progress for %g s (TUTTI_TIMEOUT_SECONDS)" % args.timeout, "MPI_Abort")
        for part in parts:
            if part not in message:
                failures.append("rank %d's error lacks %r: %s" % (r, part, message))
        # Not before the timeout; the upper bound only catches a wait that
        # is not bounded by it at all (the machine may be loaded). Between
        # collectives the timeout counts from the stopped rank's last
        # message, which may precede this rank's wait by a heartbeat
        # interval (a quarter of the timeout) and the scheduling delays of
        # 2 cores: half the timeout at least.
        earliest = 0.5 * args.timeout if args.between else args.timeout
        if took < earliest:
            failures.append("rank %d failed after %.3f s, before the %g s timeout"
                            % (r, took, args.timeout))
        if took > args.timeout + 10:
            failures.append("rank %d failed only after %.3f s" % (r, took))
    if "still alive" in out:
        failures.append("a rank was still alive 60 s after its error: the job was not aborted")
    if stops and ended - stops[0] > args.timeout + 20:
        failures.append("the job ended %.1f s after the stop" % (ended - stops[0]))
    if failures:
        sys.exit("FAIL:\n  " + "\n  ".join(failures))
    print("OK: %d ranks failed naming %s after the %g s timeout; tuttirun exit %d; "
          "job ended %.1f s after the stop; nothing left running"
          % (len(survivors), "the stopped rank" if args.between else "MPI_Iallreduce",
             args.timeout, proc.returncode, ended - stops[0]))


if __name__ == "__main__":
    main()

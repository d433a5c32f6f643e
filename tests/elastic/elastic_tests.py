#!/usr/bin/python3
"""Multi-host elastic jobs: hosts are network namespaces (tests/support/cluster.py).

Usage: elastic_tests.py --tuttirun PATH CASE     (exit 0 pass, 1 fail, 77 skip)

Cases (issue 7):
  kill_host     np 4 on two hosts; every rank of one host SIGKILLed mid-run →
                the job finishes at size 2, checksums equal, no committed step
                lost, the blacklisted host not used again, nothing left running
  link_down     the same, but the host's link is cut (processes live on)
  stop_host     the same, but the host's ranks are SIGSTOPped between or
                inside collectives (caught by the negotiation's heartbeats
                or the data path's stall watch within TUTTI_TIMEOUT_SECONDS)
  add_host      discovery adds a host → size grows at the next commit and the
                newcomers get the state (checksums equal at size 4)
  min_np        below --min-np for --elastic-timeout → fails naming the capacity
  reset_limit   more resets than --reset-limit → fails naming the limit
"""
import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import cluster as netcluster  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launcher"))
from job_util import check, fail  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "elastic_worker.py")
SKIP = 77
ARGS = None

LINE = re.compile(r"^\[(\d+)\]<stdout>: (STEP|COMMIT|RESET|DONE) wid=(\S+) gen=(\d+) rank=(\d+) "
                  r"size=(\d+) step=(\d+)(?: t=([\d.]+))?(?: checksum=(\w+))?")


class Event:
    def __init__(self, m, seen):
        self.kind = m.group(2)
        self.wid = int(m.group(3))
        self.gen, self.rank, self.size, self.step = (int(m.group(i)) for i in (4, 5, 6, 7))
        self.t = float(m.group(8)) if m.group(8) else None
        self.checksum = m.group(9)
        self.seen = seen  # time.time() when tuttirun printed it


class Job:
    """tuttirun running in the background; its stdout parsed into events as it comes."""

    def __init__(self, cluster, hosts_file, extra_flags, worker_args, env=None):
        self.events, self.lines = [], []
        self.lock = threading.Lock()
        discover = os.path.join(os.path.dirname(hosts_file), "discover.sh")
        with open(discover, "w") as f:
            f.write("#!/bin/sh\ncat %s\n" % hosts_file)
        os.chmod(discover, 0o755)
        cmd = [ARGS.tuttirun, "--host-discovery-script", discover,
               "--rsh-agent", "ip netns exec {host}", "--network-interface", cluster.bridge,
               ] + extra_flags + ["/usr/bin/python3", WORKER] + worker_args
        print("$ " + " ".join(cmd), flush=True)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.start = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=full_env)
        self.err = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, True)),
                         threading.Thread(target=self._read, args=(self.proc.stderr, False))]
        for t in self._readers:
            t.start()

    def _read(self, stream, is_stdout):
        for line in stream:
            now = time.time()
            sys.stdout.write(("%7.2f " % (now - self.start)) + line)
            sys.stdout.flush()
            with self.lock:
                (self.lines if is_stdout else self.err).append(line)
                m = LINE.match(line) if is_stdout else None
                if m:
                    self.events.append(Event(m, now))

    def wait_for(self, pred, seconds, what):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                hit = [e for e in self.events if pred(e)]
            if hit:
                return hit[0]
            if self.proc.poll() is not None:
                fail("tuttirun ended (rc %d) before %s" % (self.proc.returncode, what))
            time.sleep(0.05)
        fail("no %s within %d s" % (what, seconds))

    def finish(self, seconds):
        try:
            rc = self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("tuttirun did not finish within %d s" % seconds)
        for t in self._readers:
            t.join()
        return rc

    def of(self, kind):
        with self.lock:
            return [e for e in self.events if e.kind == kind]


def write_hosts(path, lines):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def check_consistent_finish(job, size, lost_wids=()):
    """Every member of the last generation finished with the same checksum; steps never
    went back past the last commit made before a reset."""
    done = job.of("DONE")
    check(len(done) == size, "expected %d DONE lines, got %d" % (size, len(done)))
    check(all(e.size == size for e in done), "final sizes %s" % [e.size for e in done])
    sums = {e.checksum for e in done}
    check(len(sums) == 1, "parameter checksums differ across ranks: %s" % sums)
    check(not any(e.wid in lost_wids for e in done), "a lost worker finished")
    # No committed step lost: after the last commit of generation g, the first step of
    # generation g+1 on every rank is past it.
    commits, steps = job.of("COMMIT"), job.of("STEP")
    for gen in sorted({e.gen for e in steps})[1:]:
        before = [c.step for c in commits if c.gen < gen]
        first = [s.step for s in steps if s.gen == gen]
        if before and first:
            check(min(first) > max(before),
                  "generation %d restarted at step %d, before the commit at step %d" %
                  (gen, min(first), max(before)))
    print("ok: %d ranks finished, checksum %s" % (size, sums.pop()), flush=True)


def recovery_seconds(job, fault_time, gen_before):
    first_new = job.wait_for(lambda e: e.kind == "STEP" and e.gen > gen_before and
                             e.t is not None, 120, "a step in a new generation")
    return first_new.t - fault_time


def run_fault_case(cluster, tmp, fault, timeout_flag="10"):
    hosts = os.path.join(tmp, "hosts")
    write_hosts(hosts, ["%s:2" % cluster.host("h1"), "%s:2" % cluster.host("h2")])
    job = Job(cluster, hosts, ["-np", "4", "--min-np", "2", "--max-np", "4",
                               "--elastic-timeout", "60"],
              ["--steps", "120", "--commit-every", "5"],
              env={"TUTTI_TIMEOUT_SECONDS": timeout_flag})
    job.wait_for(lambda e: e.kind == "COMMIT" and e.step >= 15, 120, "the commit of step 15")
    doomed = {e.wid for e in job.of("STEP") if e.gen == 0 and e.rank >= 2}  # h2's ranks
    time.sleep(random.uniform(0, 0.2))  # anywhere in the next steps, not right at the commit
    t_fault = time.time()
    if fault == "kill":
        n = cluster.kill_all("h2")
        check(n >= 2, "expected the workers of h2 to run there, found %d processes" % n)
    elif fault == "stop":
        n = cluster.stop_all("h2", "python3")
        check(n >= 2, "expected the workers of h2 to run there, found %d processes" % n)
    else:
        cluster.cut_link("h2")
    took = recovery_seconds(job, t_fault, 0)
    print("RECOVERY %s %.3f s (fault -> first step of the new generation)" % (fault, took),
          flush=True)
    rc = job.finish(300)
    check(rc == 0, "tuttirun exited %d" % rc)
    check_consistent_finish(job, 2, doomed)
    late = [e for e in job.events if e.wid in doomed and e.seen > t_fault + 0.5]
    check(not late, "the failed host's workers went on: %s" % [vars(e) for e in late[:3]])
    check(not any(e.kind == "STEP" and e.gen > 0 and e.size > 2 for e in job.events),
          "a generation after the fault used the blacklisted host")
    left = cluster.wait_empty(10)
    check(not left, "processes left on hosts after the job: %s" % left)
    return took


def case_kill_host(cluster, tmp):
    run_fault_case(cluster, tmp, "kill")


def case_link_down(cluster, tmp):
    took = run_fault_case(cluster, tmp, "link", timeout_flag="4")
    check(took < 4 + 10, "link-down recovery took %.1f s with TUTTI_TIMEOUT_SECONDS=4" % took)


def case_stop_host(cluster, tmp):
    took = run_fault_case(cluster, tmp, "stop", timeout_flag="4")
    check(took < 4 + 10, "stopped-host recovery took %.1f s with TUTTI_TIMEOUT_SECONDS=4" % took)


def case_add_host(cluster, tmp):
    hosts = os.path.join(tmp, "hosts")
    write_hosts(hosts, ["%s:2" % cluster.host("h1")])
    job = Job(cluster, hosts, ["--min-np", "2", "--max-np", "4", "--elastic-timeout", "60"],
              ["--steps", "120", "--commit-every", "5"])
    job.wait_for(lambda e: e.kind == "COMMIT" and e.step >= 10, 120, "the commit of step 10")
    write_hosts(hosts, ["%s:2" % cluster.host("h1"), "%s:2" % cluster.host("h2")])
    grown = job.wait_for(lambda e: e.kind == "STEP" and e.size == 4, 120, "a step at size 4")
    print("grew to size 4 in generation %d at step %d" % (grown.gen, grown.step), flush=True)
    rc = job.finish(300)
    check(rc == 0, "tuttirun exited %d" % rc)
    check_consistent_finish(job, 4)
    left = cluster.wait_empty(10)
    check(not left, "processes left on hosts after the job: %s" % left)


def case_min_np(cluster, tmp):
    hosts = os.path.join(tmp, "hosts")
    write_hosts(hosts, ["%s:1" % cluster.host("h1"), "%s:1" % cluster.host("h2")])
    job = Job(cluster, hosts, ["--min-np", "2", "--max-np", "2", "--elastic-timeout", "5"],
              ["--steps", "100000", "--commit-every", "5"])
    job.wait_for(lambda e: e.kind == "COMMIT", 120, "a commit")
    t = time.time()
    cluster.kill_all("h2")
    rc = job.finish(120)
    took = time.time() - t
    err = "".join(job.err)
    check(rc != 0, "the job succeeded below --min-np")
    check("min-np" in err, "the failure does not name --min-np: %r" % err[-800:])
    check(4 <= took <= 60, "gave up after %.1f s with --elastic-timeout 5" % took)
    left = cluster.wait_empty(10)
    check(not left, "processes left on hosts after the job: %s" % left)


def case_reset_limit(cluster, tmp):
    hosts = os.path.join(tmp, "hosts")
    write_hosts(hosts, ["%s:1" % cluster.host(n) for n in ("h1", "h2", "h3")])
    job = Job(cluster, hosts, ["--min-np", "1", "--max-np", "3", "--reset-limit", "1",
                               "--elastic-timeout", "30"],
              ["--steps", "100000", "--commit-every", "5"])
    job.wait_for(lambda e: e.kind == "COMMIT" and e.size == 3, 120, "a commit at size 3")
    cluster.kill_all("h3")
    job.wait_for(lambda e: e.kind == "STEP" and e.gen >= 1, 120, "a step after the first reset")
    cluster.kill_all("h2")
    rc = job.finish(120)
    err = "".join(job.err)
    check(rc != 0, "the job went on past --reset-limit 1")
    check("reset limit" in err or "reset-limit" in err,
          "the failure does not name the reset limit: %r" % err[-800:])
    left = cluster.wait_empty(10)
    check(not left, "processes left on hosts after the job: %s" % left)


CASES = {
    "kill_host": (case_kill_host, ["h1", "h2"]),
    "link_down": (case_link_down, ["h1", "h2"]),
    "stop_host": (case_stop_host, ["h1", "h2"]),
    "add_host": (case_add_host, ["h1", "h2"]),
    "min_np": (case_min_np, ["h1", "h2"]),
    "reset_limit": (case_reset_limit, ["h1", "h2", "h3"]),
}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuttirun", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    ARGS = ap.parse_args()
    why = netcluster.available()
    if why:
        print("SKIP: " + why, flush=True)
        return SKIP
    # ctest's timeout: leave through the with-block, which removes the cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("FAIL: terminated"))
    fn, names = CASES[ARGS.case]
    with tempfile.TemporaryDirectory() as tmp, netcluster.Cluster(names) as cluster:
        fn(cluster, tmp)
    print("PASS " + ARGS.case, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Jobs of examples/torch_fashion_mnist_elastic.py (ctest calls this; docs/elastic.md).

    elastic_example_jobs.py plain --np 2 --tuttirun T --library L
    elastic_example_jobs.py kill  --tuttirun T --library L
    elastic_example_jobs.py grow  --tuttirun T --library L

plain: a plain job (no elastic driver): every rank commits at the expected
steps, in order; the parameter checksums agree.
kill: an elastic job of 3 workers on two host names of this machine
(localhost:2 and 127.0.0.1:1: two hosts to the driver, no root needed); once
step 20 is committed, the worker on 127.0.0.1 is SIGKILLed. The survivors
finish at size 2 with equal checksums, resume right after their last commit
(no committed step lost, the step counter never goes back past a commit), and
the recovery time (kill -> first step of the new generation) is printed.
grow: 2 workers on localhost; once step 20 is committed, host discovery adds
127.0.0.1:1: the job grows to size 3 at a later commit and the newcomer ends
with the same checksum. Exits 0 (pass) or 1 with a message.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from run_job_tests import PYTHON, REPO, job_env, run

EXAMPLE = os.path.join(REPO, "examples", "torch_fashion_mnist_elastic.py")
PREFIX = r"\[(\d+)\]<stdout>: "
COMMIT = re.compile(PREFIX + r"commit: generation (-?\d+) rank (\d+) size (\d+) epoch (\d+) "
                             r"batch (\d+) step (\d+)")
STEP = re.compile(PREFIX + r"step-time: generation (-?\d+) rank \d+ size (\d+) step (\d+) "
                           r"time ([\d.]+)")
CHECKSUM = re.compile(PREFIX + r"rank \d+: parameter checksum (\S+) \(sum (\S+)\)")
ELASTIC_ARGS = ["--train-samples", "6000", "--epochs", "2", "--batch-size", "32",
                "--commit-every", "5", "--log-times"]


class Failure(Exception):
    pass


def check(ok, message):
    if not ok:
        raise Failure(message)


def commits_by_worker(out):
    """{worker (the output prefix): [(generation, size, step), ...]} in output order."""
    by = {}
    for wid, gen, _, size, _, _, step in COMMIT.findall(out):
        by.setdefault(int(wid), []).append((int(gen), int(size), int(step)))
    return by


def check_checksums(out, workers):
    sums = {int(w): (d, s) for w, d, s in CHECKSUM.findall(out)}
    check(sorted(sums) == sorted(workers), "checksums from workers %s, expected %s"
          % (sorted(sums), sorted(workers)))
    check(len(set(sums.values())) == 1, "parameter checksums differ: %s" % sums)
    return sums[workers[0]][0]


def check_commits_never_go_back(out):
    for wid, commits in commits_by_worker(out).items():
        steps = [s for _, _, s in commits]
        check(steps == sorted(steps), "worker %d committed steps out of order: %s" % (wid, steps))


def plain(args):
    commit_every, max_steps = 7, 50
    rc, out = run([args.tuttirun, "-np", str(args.np), PYTHON, EXAMPLE, "--epochs", "2",
                   "--train-samples", "1000", "--batch-size", "16", "--commit-every",
                   str(commit_every), "--max-steps", str(max_steps)], job_env(args), args.timeout)
    check(rc == 0, "the job exited with %d" % rc)
    by_rank = commits_by_worker(out)
    check(all(g == -1 and n == args.np for c in by_rank.values() for g, n, _ in c),
          "a commit with a generation or size other than (-1, %d)" % args.np)
    per_rank = -(-1000 // args.np)  # images dealt to each rank per epoch
    per_epoch = -(-per_rank // 16)  # steps per epoch
    last = min(max_steps, 2 * per_epoch)
    expected = []  # every commit_every steps, and at the end of each epoch
    for step in range(1, last + 1):
        expected += [step] * ((step % commit_every == 0) + (step % per_epoch == 0))
    steps = {r: [s for _, _, s in c] for r, c in by_rank.items()}
    check(sorted(steps) == list(range(args.np)) and all(s == expected for s in steps.values()),
          "commits at steps %s, expected %s on each of %d ranks" % (steps, expected, args.np))
    digest = check_checksums(out, list(range(args.np)))
    check(re.search(r"done: %d steps in \S+ s, final test accuracy" % last, out),
          "no 'done: %d steps' line" % last)
    print("plain: commits at %s on %d ranks, checksum %s" % (expected, args.np, digest))


class ElasticJob:
    """tuttirun in elastic mode in the background; hosts come from a file the
    test may rewrite (the discovery script prints it)."""

    def __init__(self, args, hosts, np, max_np):
        self.dir = tempfile.mkdtemp(prefix="tutti-elastic-example-")
        self.hosts_file = os.path.join(self.dir, "hosts")
        self.set_hosts(hosts)
        discover = os.path.join(self.dir, "discover.sh")
        with open(discover, "w") as f:
            f.write("#!/bin/sh\ncat '%s'\n" % self.hosts_file)
        os.chmod(discover, 0o755)
        cmd = [args.tuttirun, "-np", str(np), "--min-np", "2", "--max-np", str(max_np),
               "--host-discovery-script", discover, PYTHON, EXAMPLE] + ELASTIC_ARGS
        print("+ " + " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, env=job_env(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines, self.lock = [], threading.Lock()
        self.reader = threading.Thread(target=self._read)
        self.reader.start()
        self.timeout = args.timeout

    def set_hosts(self, hosts):
        with open(self.hosts_file + ".new", "w") as f:
            f.write("".join(h + "\n" for h in hosts))
        os.replace(self.hosts_file + ".new", self.hosts_file)

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line)

    def output(self):
        with self.lock:
            return "".join(self.lines)

    def wait_for(self, pattern, what):
        deadline = time.time() + self.timeout
        while time.time() < deadline and self.proc.poll() is None:
            if re.search(pattern, self.output(), re.M):
                return
            time.sleep(0.05)
        raise Failure("never saw %s" % what)

    def finish(self):
        try:
            rc = self.proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.reader.join()
        out = self.output()
        print(out, flush=True)
        return rc, out

    def worker_pid(self, worker_id):
        """The pid of the example process of elastic worker `worker_id` (a
        descendant of this job's tuttirun)."""
        parents = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open("/proc/%s/stat" % entry) as f:
                        parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    continue
        for pid in parents:
            p = pid
            while p in parents and p != self.proc.pid:
                p = parents[p]
            if p != self.proc.pid:
                continue
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if (b"TUTTI_ELASTIC_WORKER_ID=%d" % worker_id in env
                    and os.path.basename(EXAMPLE).encode() in cmdline):
                return pid
        raise Failure("no process of worker %d under tuttirun %d" % (worker_id, self.proc.pid))


COMMITTED_20 = PREFIX + r"commit: .* step 20$"


def kill(args):
    job = ElasticJob(args, ["localhost:2", "127.0.0.1:1"], np=3, max_np=3)
    try:
        job.wait_for(COMMITTED_20, "the commit of step 20")
        victim = job.worker_pid(2)
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
    finally:
        rc, out = job.finish()
    check(rc == 0, "the job exited with %d" % rc)
    commits = commits_by_worker(out)
    check(sorted(commits) == [0, 1, 2], "commits from workers %s" % sorted(commits))
    last_gen = max(g for c in commits.values() for g, _, _ in c)
    check(last_gen >= 1 and all(n == 2 for w in (0, 1) for g, n, _ in commits[w] if g == last_gen),
          "the job did not go on at size 2: %s" % commits)
    check_commits_never_go_back(out)
    steps = [(int(g), int(s), float(t)) for _, g, _, s, t in STEP.findall(out)]
    before = max(s for g, _, s in commits[0] + commits[1] if g == 0)
    first_new = min((t, s) for g, s, t in steps if g == 1)
    check(first_new[1] > before, "generation 1 began at step %d, before the commit at step %d"
          % (first_new[1], before))
    digest = check_checksums(out, [0, 1])
    print("kill: resumed at step %d after the commit at step %d; checksum %s"
          % (first_new[1], before, digest))
    print("RECOVERY %.3f s (SIGKILL -> first step of generation 1)" % (first_new[0] - killed_at),
          flush=True)


def kill_with_worker(args, python, worker, env):
    """kill() on another framework's worker script (printing the same lines
    as the example): `python` runs `worker`; `env` entries (the op library's
    path, ...) go into this process's environment, which the jobs inherit.
    Returns 0, or 1 after printing the failure."""
    global PYTHON, EXAMPLE, ELASTIC_ARGS
    PYTHON, EXAMPLE, ELASTIC_ARGS = python, worker, []
    os.environ.update(env)
    try:
        kill(args)
    except Failure as e:
        print("FAIL: %s" % e, flush=True)
        return 1
    return 0


def grow(args):
    job = ElasticJob(args, ["localhost:2"], np=2, max_np=3)
    try:
        job.wait_for(COMMITTED_20, "the commit of step 20")
        job.set_hosts(["localhost:2", "127.0.0.1:1"])
    finally:
        rc, out = job.finish()
    check(rc == 0, "the job exited with %d" % rc)
    commits = commits_by_worker(out)
    check(sorted(commits) == [0, 1, 2], "commits from workers %s (no newcomer?)" % sorted(commits))
    check(all(n == 3 and s > 20 for _, n, s in commits[2]),
          "the newcomer's commits: %s" % commits[2])
    check_commits_never_go_back(out)
    digest = check_checksums(out, [0, 1, 2])
    print("grow: size 3 from step %d; checksum %s on 3 workers" % (commits[2][0][2], digest))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["plain", "kill", "grow"])
    p.add_argument("--np", type=int, default=2, help="plain: ranks")
    p.add_argument("--tuttirun", required=True)
    p.add_argument("--library", help="libtutti.so to load (TUTTI_LIBRARY)")
    p.add_argument("--timeout", type=int, default=300, help="seconds")
    args = p.parse_args()
    try:
        {"plain": plain, "kill": kill, "grow": grow}[args.what](args)
    except Failure as e:
        print("FAIL: %s" % e, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

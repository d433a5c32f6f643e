#!/usr/bin/python3
"""tutti under a real Slurm: brings up a private single-node cluster (munged,
slurmctld, slurmd from Debian's slurm-wlm packages, on free loopback ports,
state under a temporary directory), then runs:

  1. srun -n 4 of a collective script: placement from Slurm's variables;
  2. srun -n 2 without TUTTI_SECRET: every task fails saying to export it;
  3. srun -n 2 of the main job's first steps: loss decreases, equal parameters;
  4. salloc -n 3 tuttirun: the hosts and slots of the allocation;
  5. sbatch of a script that runs srun (the batch step is not a rank).

    slurm_tests.py --tuttirun T --library L

Needs root (slurmd starts tasks as the submitting user). Exits 77 (ctest's
skip code) when Slurm is not installed, except under CI=true, where that is a
failure: scripts/install-deps installs it.
"""

import argparse
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "launcher"))
from job_util import fail, run_logged  # noqa: E402
PYTHON = "/usr/bin/python3"
DAEMONS = ["/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"]
CLIENTS = ["srun", "salloc", "sbatch", "sinfo"]

SLURM_CONF = """\
ClusterName=tutti
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={tmp}/munge.socket
CredType=cred/munge
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd.pid
SlurmctldLogFile={tmp}/slurmctld.log
SlurmdLogFile={tmp}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
FirstJobId={first_job}
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Cluster:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="tutti-slurm-test.")
        os.chmod(self.tmp, 0o700)
        self.procs = []
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = os.path.join(self.tmp, "slurm.conf")

    def start(self):
        t = self.tmp
        for d in ("state", "spool"):
            os.mkdir(os.path.join(t, d))
        key = os.path.join(t, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        # A random first job id: the rendezvous port is derived from it, so
        # two of these tests at once (or a stale job) do not meet on one port.
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(SLURM_CONF.format(tmp=t, ctld_port=free_port(), d_port=free_port(),
                                      first_job=random.randint(1000, 5000000)))
        self.spawn(["/usr/sbin/munged", "--foreground", "--force", "--socket", t + "/munge.socket",
                    "--key-file", key, "--pid-file", t + "/munged.pid", "--log-file",
                    t + "/munged.log", "--seed-file", t + "/munged.seed"], "munged")
        self.wait_for(lambda: os.path.exists(t + "/munge.socket"), "munged's socket")
        self.spawn(["/usr/sbin/slurmctld", "-D", "-i", "-f", self.env["SLURM_CONF"]], "slurmctld")
        self.spawn(["/usr/sbin/slurmd", "-D", "-N", "localhost", "-f", self.env["SLURM_CONF"]],
                   "slurmd")
        self.wait_for(self.node_idle, "the node to be idle (sinfo)", timeout=60)

    def spawn(self, cmd, name):
        log = open(os.path.join(self.tmp, name + ".out"), "w")
        self.procs.append((name, subprocess.Popen(cmd, env=self.env, stdout=log,
                                                  stderr=subprocess.STDOUT)))

    def node_idle(self):
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True,
                             text=True).stdout.strip()
        return out == "idle"

    def wait_for(self, ready, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    self.dump()
                    sys.exit("FAIL: %s exited with %d while waiting for %s" % (name, p.returncode,
                                                                              what))
            if ready():
                return
            time.sleep(0.3)
        self.dump()
        sys.exit("FAIL: no %s within %d s" % (what, timeout))

    def dump(self):
        for name in ("munged.out", "slurmctld.log", "slurmctld.out", "slurmd.log", "slurmd.out"):
            path = os.path.join(self.tmp, name)
            if os.path.exists(path):
                with open(path) as f:
                    print("--- %s (last lines)\n%s" % (name, "".join(f.readlines()[-30:])))

    def stop(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run(cmd, env, timeout=300):
    return run_logged(cmd, env, timeout)


def check_tasks(out, n, under_srun):
    got = sorted(int(m) for m in re.findall(r"slurm task (\d+)/%d OK .*under_srun=%d" %
                                            (n, int(under_srun)), out))
    if got != list(range(n)):
        fail("expected 'slurm task r/%d OK' from ranks 0..%d, got ranks %s" % (n, n - 1, got))


def test_srun_collective(env):
    rc, out = run(["srun", "-n", "4", PYTHON, os.path.join(HERE, "slurm_collective.py"), "4"],
                  env)
    if rc != 0:
        fail("srun -n 4 exited with %d" % rc)
    check_tasks(out, 4, True)
    if out.count("local") != 4 or len(re.findall(r"local \d/4 cross 0/1", out)) != 4:
        fail("expected local size 4 and one host on every task")


def test_srun_without_secret(env):
    env = dict(env)
    del env["TUTTI_SECRET"]
    rc, out = run(["srun", "-n", "2", PYTHON, os.path.join(HERE, "slurm_collective.py"), "2"],
                  env, timeout=120)
    if rc == 0:
        fail("srun without TUTTI_SECRET succeeded")
    if out.count("TUTTI_SECRET is not set") != 2 or "export" not in out:
        fail("expected every task to say that TUTTI_SECRET is not set and to export it")


def test_srun_main_job(env):
    rc, out = run(["srun", "-n", "2", PYTHON, os.path.join(REPO, "examples", "torch_fashion_mnist.py"),
                   "--epochs", "1", "--max-steps", "15", "--log-interval", "5",
                   "--batch-size", "32"], env)
    if rc != 0:
        fail("the main job under srun exited with %d" % rc)
    losses = [float(x) for x in re.findall(r"step \d+/\d+ loss ([0-9.]+)", out)]
    sums = re.findall(r"rank (\d+): parameter checksum (\S+) \(sum (\S+)\)", out)
    if len(losses) < 2 or not losses[-1] < losses[0]:
        fail("the loss did not decrease: %s" % losses)
    if sorted(int(r) for r, _, _ in sums) != [0, 1] or len({(d, s) for _, d, s in sums}) != 1:
        fail("parameter checksums differ or are missing: %s" % sums)


def test_salloc_tuttirun(env, tuttirun):
    # tuttirun inside the allocation: no -np, no -H; hosts and slots are the
    # allocation's (localhost, 3 tasks).
    rc, out = run(["salloc", "-n", "3", tuttirun, "--verbose", PYTHON,
                   os.path.join(HERE, "slurm_collective.py"), "3"], env)
    if rc != 0:
        fail("salloc -n 3 tuttirun exited with %d" % rc)
    check_tasks(out, 3, False)
    if "hosts from the Slurm allocation (SLURM_JOB_NODELIST=localhost)" not in out:
        fail("tuttirun did not say it took the hosts from the allocation")


def test_sbatch(env, tmp):
    script = os.path.join(tmp, "job.sh")
    output = os.path.join(tmp, "job.out")
    with open(script, "w") as f:
        f.write("#!/bin/sh\n"
                "%s %s 1 || exit 1\n"  # the batch step itself: a job of one
                "srun -n 2 %s %s 2\n" % (PYTHON, os.path.join(HERE, "slurm_collective.py"),
                                         PYTHON, os.path.join(HERE, "slurm_collective.py")))
    rc, out = run(["sbatch", "--wait", "-n", "2", "-o", output, script], env)
    with open(output) as f:
        text = f.read()
    print(text)
    if rc != 0:
        fail("sbatch --wait exited with %d" % rc)
    check_tasks(text, 2, True)
    if "slurm task 0/1 OK" not in text:
        fail("the batch script's own python was not a job of one rank")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tuttirun", required=True)
    p.add_argument("--library", required=True)
    args = p.parse_args()
    missing = [d for d in DAEMONS if not os.access(d, os.X_OK)]
    missing += [c for c in CLIENTS if shutil.which(c) is None]
    if missing or os.geteuid() != 0:
        why = "not root" if not missing else "missing " + ", ".join(missing)
        msg = "Slurm test needs root and slurmctld, slurmd, munge (%s); scripts/install-deps" % why
        if os.environ.get("CI") == "true":
            fail(msg)
        print("SKIP: " + msg)
        return 77
    cluster = Cluster()
    try:
        began = time.time()
        cluster.start()
        print("ok: Slurm up (%.1f s)" % (time.time() - began), flush=True)
        env = dict(cluster.env)
        env["TUTTI_LIBRARY"] = os.path.abspath(args.library)
        env["PYTHONPATH"] = os.path.join(REPO, "bindings", "python")
        env["TUTTI_SECRET"] = os.urandom(16).hex()
        env["TUTTI_TIMEOUT_SECONDS"] = "30"
        env["TUTTI_STALL_CHECK_TIME_SECONDS"] = "20"
        env["TUTTI_STALL_SHUTDOWN_TIME_SECONDS"] = "60"
        steps = [("srun -n 4", lambda: test_srun_collective(env)),
                 ("no secret", lambda: test_srun_without_secret(env)),
                 ("salloc + tuttirun",
                  lambda: test_salloc_tuttirun(env, os.path.abspath(args.tuttirun))),
                 ("sbatch", lambda: test_sbatch(env, cluster.tmp)),
                 ("main job", lambda: test_srun_main_job(env))]
        for name, step in steps:
            began = time.time()
            step()
            print("ok: %s (%.1f s)" % (name, time.time() - began), flush=True)
    except SystemExit:
        cluster.dump()
        raise
    finally:
        cluster.stop()
    print("PASS: srun, salloc + tuttirun and sbatch on a private Slurm")
    return 0


if __name__ == "__main__":
    sys.exit(main())

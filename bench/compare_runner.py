"""What bench/compare and bench/compare_hosts share: the job runner that keeps
every job's log and parses its table, and the flags and checks both use."""

import os
import signal
import socket
import subprocess
import time

import compare_report

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)

JOB_TIMEOUT_S = 900


class Runner:
    """Runs jobs, keeps their logs, parses their tables."""

    def __init__(self, args, logs=None):
        self.args = args
        self.logs = logs or os.path.join(args.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.rows = []       # allreduce: dict(system, np, bytes, time_us, busbw, wrong)
        self.steps = []      # gradient set: dict(system, np, strategy, median_ms, min_ms, max_ms, wrong)
        self.skipped = {}    # system -> reason
        self.failures = []   # "system np: what"
        self.labels = []     # the logs this run wrote (logs/<label>.txt), in order
        cores = os.cpu_count() or 1
        self.cores = cores

    def env(self, np_, extra=None):
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(max(1, self.cores // np_)))
        if os.geteuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        env.update(extra or {})
        return env

    def run(self, label, argv_list, env):
        """Starts one process per argv in argv_list (one list = one launcher
        command); returns rank 0's (first process's) stdout, or None on failure."""
        log = os.path.join(self.logs, label + ".txt")
        self.labels.append(label)
        print(f"compare: {label}", flush=True)
        procs = []
        with open(log, "w") as f:
            f.write("# " + " | ".join(" ".join(a) for a in argv_list) + "\n")
            f.flush()
            start = time.time()
            for i, argv in enumerate(argv_list):
                procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE if i == 0 else f,
                                              stderr=f, text=True, start_new_session=True,
                                              cwd=BENCH))
            try:
                out, _ = procs[0].communicate(timeout=JOB_TIMEOUT_S)
                codes = [procs[0].returncode] + [p.wait(timeout=60) for p in procs[1:]]
            except subprocess.TimeoutExpired:
                for p in procs:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                out, codes = "", ["timeout"]
            f.write(out)
            f.write(f"# exit codes {codes}, {time.time() - start:.1f} s\n")
        if any(c != 0 for c in codes):
            self.failures.append(f"{label}: exit codes {codes} (see {os.path.relpath(log, ROOT)})")
            print(f"compare: {label} FAILED: exit codes {codes}", flush=True)
        return out

    def sweep(self, system, np_, argv_list, env):
        out = self.run(f"{system}-np{np_}", argv_list, env)
        for r in compare_report.parse_rows(out or ""):
            r.update(system=system, np=np_)
            self.rows.append(r)

    def gradient_set(self, label, np_, argv_list, env, system):
        out = self.run(f"gradset-{label}-np{np_}", argv_list, env)
        for s in compare_report.parse_steps(out or ""):
            s.update(system=system, np=np_)
            self.steps.append(s)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sweep_flags(args, big):
    """Sweep flags; `big`: the sweep goes to 256 MiB."""
    if args.quick:
        return ["-b", "4", "-e", "4M", "-f", "16", "-n", "10", "-w", "2", "-m", "64M", "-c", "1"]
    return ["-b", "4", "-e", "256M" if big else "64M", "-f", "4", "-n", str(args.iterations),
            "-w", "5", "-m", "512M", "-c", "1"]


def step_flags(args):
    return ["-n", "3", "-w", "1", "-c", "1"] if args.quick else ["-n", str(args.steps), "-w", "2",
                                                                 "-c", "1"]


def binary(args, rel):
    path = os.path.join(args.build, rel)
    return path if os.path.exists(path) else None


def horovod_ok(python):
    if not python or not os.path.exists(python):
        return f"no Horovod Python at {python} (see the README section 'Benchmarks')"
    r = subprocess.run([python, "-c", "import horovod.torch as h; print(h.mpi_built())"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "import horovod.torch failed: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return None


def mpirun(np_, btl=None):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe"]
    return cmd + (["--mca", "btl", btl] if btl else [])

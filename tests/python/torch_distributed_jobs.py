#!/usr/bin/python3
"""Jobs of the torch.distributed backend that pytest under tuttirun cannot run
(ctest calls this; tests/python/torch_distributed.cmake).

    torch_distributed_jobs.py torchrun --np 2 --library L
    torch_distributed_jobs.py kill --np 3 --library L
    torch_distributed_jobs.py exits --np 2 --library L --runs 20
    ... --python build/torch2-venv/bin/python     (torch 2.x; 77 when absent)

torchrun: Debian's torchrun (python3 -m torch.distributed.run, with
--redirects 1 --tee 1, which Python 3.11 needs) runs, at --np ranks,
test_torch_distributed.py and test_torch_ddp.py (hvd.init() joins through
torchrun's store), then examples/torch_ddp_fashion_mnist.py for a few steps
(init_process_group("tutti") joins through the store torch passes).
kill: --np ranks started without a launcher (TUTTI_* by hand) train DDP on
"tutti"; the last SIGKILLs itself mid-backward (torch_ddp_kill_worker.py);
every survivor must report an error within TUTTI_TIMEOUT_SECONDS (10 here).
exits: torch_exit_worker.py --runs times under torchrun, ending in turn by
returning, destroy_process_group, hvd.shutdown and sys.exit with an op in
flight; no run may abort ("terminate called", SIGABRT) or exit non-zero.
Exits non-zero with a message saying what was wrong.
"""

import argparse
import os
import re
import secrets
import socket
import subprocess
import sys
import time

from run_job_tests import run  # same directory: the job runner with a deadline

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
TIMEOUT_SECONDS = 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(args):
    env = dict(os.environ)
    env["TUTTI_LIBRARY"] = os.path.abspath(args.library)
    env["PYTHONPATH"] = os.path.join(REPO, "bindings", "python")
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("TUTTI_TIMEOUT_SECONDS", "30")
    env.setdefault("TUTTI_STALL_CHECK_TIME_SECONDS", "20")
    env.setdefault("TUTTI_STALL_SHUTDOWN_TIME_SECONDS", "60")
    for var in [v for v in env if v.startswith(("TUTTI_RANK", "TUTTI_SIZE", "MASTER_", "RANK"))]:
        del env[var]
    return env


def torchrun(args, extra):
    return [args.python, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
            "--nproc_per_node", str(args.np), "--master_addr", "127.0.0.1",
            "--master_port", str(free_port())] + extra


def cmd_torchrun(args):
    env = base_env(args)
    tests = [os.path.join(HERE, f) for f in ("test_torch_distributed.py", "test_torch_ddp.py")]
    rc, out = run(torchrun(args, ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"] + tests),
                  env, args.timeout)
    if rc != 0 or len(re.findall(r"\d+ passed", out)) != args.np:
        print("FAIL: pytest under torchrun exited %d" % rc)
        return 1
    example = os.path.join(REPO, "examples", "torch_ddp_fashion_mnist.py")
    rc, out = run(torchrun(args, [example, "--max-steps", "20", "--log-interval", "10",
                                  "--train-fraction", "0.05"]), env, args.timeout)
    sums = set(re.findall(r"parameter checksum (\S+)", out))
    if rc != 0 or len(sums) != 1 or "backend tutti" not in out:
        print("FAIL: the example under torchrun exited %d, checksums %s" % (rc, sums))
        return 1
    return 0


EXIT_MODES = ("plain", "destroy", "hvd-shutdown", "sys-exit")


def cmd_exits(args):
    """The exit worker --runs times under torchrun, cycling its exit modes:
    every run must exit 0 on every rank with no abort ("terminate called",
    SIGABRT) and no Python thread error at shutdown."""
    env = base_env(args)
    worker = os.path.join(HERE, "torch_exit_worker.py")
    bad = []
    for i in range(args.runs):
        mode = EXIT_MODES[i % len(EXIT_MODES)]
        rc, out = run(torchrun(args, [worker, mode]), env, args.timeout)
        done = len(re.findall(r"rank \d+/%d: done" % args.np, out))
        aborted = [m for m in ("terminate called", "Aborted", "core dumped", "SIGABRT",
                               "Fatal Python error", "Exception ignored in") if m in out]
        if rc != 0 or done != args.np or aborted:
            bad.append((i, mode, rc, done, aborted))
    if bad:
        print("FAIL: runs that did not end cleanly (run, mode, exit, ranks done, signs): %s" % bad)
        return 1
    print("exits: %d runs x %d ranks ended cleanly (%s)" % (args.runs, args.np, ", ".join(EXIT_MODES)))
    return 0


def cmd_kill(args):
    env = base_env(args)
    env.update({"TUTTI_SIZE": str(args.np), "TUTTI_RENDEZVOUS_ADDR": "127.0.0.1",
                "TUTTI_RENDEZVOUS_PORT": str(free_port()), "TUTTI_SECRET": secrets.token_hex(8),
                "TUTTI_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS)})
    worker = os.path.join(HERE, "torch_ddp_kill_worker.py")
    procs = []
    for r in range(args.np):
        env_r = dict(env, TUTTI_RANK=str(r), TUTTI_LOCAL_RANK=str(r), TUTTI_LOCAL_SIZE=str(args.np))
        procs.append(subprocess.Popen([args.python, worker], env=env_r, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    deadline = time.time() + args.timeout
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1, deadline - time.time()))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print("".join(o for o in outs))
            print("FAIL: a rank hung (no exit within %d s)" % args.timeout)
            return 1
    out = "".join(outs)
    print(out)
    print("exit codes: %s" % [p.returncode for p in procs])
    killed = re.findall(r"killing myself at ([0-9.]+)", out)
    errors = re.findall(r"rank (\d+): error at ([0-9.]+) after", out)
    if len(killed) != 1 or procs[-1].returncode != -9:
        print("FAIL: the victim did not die by SIGKILL in step 3 (exit %s)" % procs[-1].returncode)
        return 1
    late = [(r, float(t) - float(killed[0])) for r, t in errors
            if float(t) - float(killed[0]) > TIMEOUT_SECONDS]
    if sorted(int(r) for r, _ in errors) != list(range(args.np - 1)) or late:
        print("FAIL: survivors with an error: %s; later than %d s: %s"
              % (sorted(r for r, _ in errors), TIMEOUT_SECONDS, late))
        return 1
    if any(p.returncode != 0 for p in procs[:-1]):
        print("FAIL: survivor exit codes %s" % [p.returncode for p in procs[:-1]])
        return 1
    print("kill: %d survivors failed within %.2f s of the SIGKILL"
          % (len(errors), max(float(t) - float(killed[0]) for _, t in errors)))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["torchrun", "kill", "exits"])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--library", required=True, help="libtutti.so (TUTTI_LIBRARY)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per job")
    p.add_argument("--runs", type=int, default=20, help="exits: how many jobs")
    p.add_argument("--python", default=PYTHON, help="the ranks' interpreter (default %s)" % PYTHON)
    args = p.parse_args()
    if not os.path.exists(args.python):
        print("SKIP: no interpreter %s (scripts/install-deps --torch2 makes the torch 2.x venv)"
              % args.python)
        return 77
    return {"torchrun": cmd_torchrun, "kill": cmd_kill, "exits": cmd_exits}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())

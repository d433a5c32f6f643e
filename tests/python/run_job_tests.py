#!/usr/bin/python3
"""Runs the multi-process tests of the bindings under tuttirun (ctest calls this).

    run_job_tests.py pytest    --np 3 --tuttirun T --library L [--files F ...] [--mpi]
    run_job_tests.py c-example --np 3 --tuttirun T --binary build/examples/c_allreduce
    run_job_tests.py main-job  --np 2 --tuttirun T --library L
    ... --python build/torch2-venv/bin/python   (another interpreter: torch 2.x)
    ... main-job --python V/bin/python --wheel  (tutti as installed in that venv)

pytest: tests/python (or --files, relative to it) under every rank of a job.
c-example: the plain-C example prints OK on every rank. main-job: a short run
of examples/torch_fashion_mnist.py whose loss decreases and whose parameter
checksums agree on every rank. (The elastic example: elastic_example_jobs.py.)
Exits non-zero with a message saying what was wrong; 77 (ctest's skip) when
--python names an interpreter that is not there (scripts/install-deps --torch2
makes build/torch2-venv).
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # the default interpreter with torch (python3-torch)
SKIP = 77


def run(cmd, env, timeout):
    print("+ " + " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        print(e.stdout or "")
        sys.exit("FAIL: %s did not finish within %d s" % (" ".join(cmd[:4]), timeout))
    print(proc.stdout, flush=True)
    return proc.returncode, proc.stdout


def job_env(args):
    env = dict(os.environ)
    # --wheel: the venv's installed tutti (its own libtutti.so), no source tree
    if getattr(args, "wheel", False):
        env.pop("TUTTI_LIBRARY", None)
        env.pop("PYTHONPATH", None)
    else:
        if args.library:
            env["TUTTI_LIBRARY"] = os.path.abspath(args.library)
        env["PYTHONPATH"] = os.path.join(REPO, "bindings", "python") + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TUTTI_TIMEOUT_SECONDS", "30")
    # Ranks that fall out of step (a failed assert on one rank) fail, not hang.
    env.setdefault("TUTTI_STALL_CHECK_TIME_SECONDS", "20")
    env.setdefault("TUTTI_STALL_SHUTDOWN_TIME_SECONDS", "60")
    return env


def framework_skip_reason(python, modules, library, install_flag, cmake_python):
    """Why a framework's tests cannot run here (None: they can): `python`
    missing or unable to import `modules` (scripts/install-deps
    `install_flag` makes its venv), or the op `library` not built."""
    if not os.access(python, os.X_OK):
        return "%s does not exist: run scripts/install-deps %s" % (python, install_flag)
    probe = subprocess.run([python, "-c", "import " + ", ".join(modules)],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return ("%s cannot import %s (scripts/install-deps %s installs them): %s"
                % (python, ", ".join(modules), install_flag, probe.stderr.strip()[-300:]))
    if not library or not os.path.exists(library):
        return ("the op library was not built (%s): configure with -D%s=%s and build"
                % (library, cmake_python, python))
    return None


def run_installed_wheel(python, np_, script, env, timeout, install_hint):
    """Runs `script` on np_ ranks with the tutti that a framework venv has
    installed (its own tuttirun, libtutti.so and op library), the source tree
    and build tree kept out (no PYTHONPATH, TUTTI_LIBRARY, TUTTI_*_LIBRARY).
    Each rank prints "rank R: OK"; returns 0 when every rank did."""
    tuttirun = os.path.join(os.path.dirname(python), "tuttirun")
    if not os.access(tuttirun, os.X_OK):
        print("FAIL: %s is missing: the wheel is not installed in the venv (%s installs it)"
              % (tuttirun, install_hint))
        return 1
    env = {k: v for k, v in env.items()
           if k != "PYTHONPATH" and not (k.startswith("TUTTI_") and k.endswith("LIBRARY"))}
    rc, out = run([tuttirun, "-np", str(np_), python, script], env, timeout)
    oks = len(re.findall(r"rank \d+: OK", out))
    if rc != 0 or oks != np_:
        print("FAIL: exit code %d, %d of %d ranks OK" % (rc, oks, np_))
        return 1
    return 0


def cmd_pytest(args):
    paths = [os.path.join(HERE, f) for f in args.files] if args.files else [HERE]
    launcher = [args.tuttirun] + (["--mpi"] if args.mpi else [])
    rc, _ = run(launcher + ["-np", str(args.np), args.python, "-m", "pytest", "-q", "-x",
                            "-p", "no:cacheprovider"] + paths, job_env(args), args.timeout)
    return rc


def cmd_c_example(args):
    rc, out = run([args.tuttirun, "-np", str(args.np), args.binary], job_env(args), args.timeout)
    oks = len(re.findall(r"rank \d+/%d: OK" % args.np, out))
    if rc != 0 or oks != args.np:
        print("FAIL: exit %d, %d of %d ranks said OK" % (rc, oks, args.np))
        return 1
    return 0


def check_training_job(rc, out, np_, what, min_accuracy=None):
    """The verdict on a short training job of an example (0: pass, 1 after
    printing why): it exited 0, its logged loss decreased, every rank
    printed the same parameter checksum ("rank R: parameter checksum D"),
    and, with min_accuracy, the last test accuracy ("test accuracy A%")
    reached it."""
    if rc != 0:
        print("FAIL: the job exited with %d" % rc)
        return 1
    losses = [float(x) for x in re.findall(r"step \d+/\d+ loss ([0-9.]+)", out)]
    sums = re.findall(r"rank (\d+): parameter checksum (\S+)", out)
    accuracy = re.findall(r"test accuracy ([0-9.]+)%", out)
    if len(losses) < 2 or not losses[-1] < losses[0]:
        print("FAIL: the loss did not decrease: %s" % losses)
        return 1
    if sorted(int(r) for r, _ in sums) != list(range(np_)) or len({d for _, d in sums}) != 1:
        print("FAIL: parameter checksums differ or are missing: %s" % sums)
        return 1
    if min_accuracy is not None and (not accuracy or float(accuracy[-1]) < min_accuracy):
        print("FAIL: test accuracy %s%% is not above %s%%" % (accuracy, min_accuracy))
        return 1
    print("%s: loss %.4f -> %.4f, test accuracy %s%%, checksum %s on %d ranks"
          % (what, losses[0], losses[-1], accuracy[-1] if accuracy else "-", sums[0][1], np_))
    return 0


def cmd_main_job(args):
    rc, out = run([args.tuttirun, "-np", str(args.np), args.python,
                   os.path.join(REPO, "examples", "torch_fashion_mnist.py"), "--epochs", "1",
                   "--train-fraction", "0.1", "--log-interval", "5", "--batch-size", "32"],
                  job_env(args), args.timeout)
    return check_training_job(rc, out, args.np, "main job")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["pytest", "c-example", "main-job"])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--tuttirun", required=True)
    p.add_argument("--library", help="libtutti.so to load (TUTTI_LIBRARY)")
    p.add_argument("--binary", help="c-example: the program to run")
    p.add_argument("--files", nargs="*", help="pytest: test files (relative to tests/python)")
    p.add_argument("--timeout", type=int, default=600, help="seconds")
    p.add_argument("--mpi", action="store_true", help="pytest: through mpirun (tuttirun --mpi)")
    p.add_argument("--python", default=PYTHON, help="the ranks' interpreter (default %s)" % PYTHON)
    p.add_argument("--wheel", action="store_true",
                   help="use tutti as installed for --python (its venv's tuttirun and "
                        "libtutti.so), not the source tree")
    args = p.parse_args()
    if not os.path.exists(args.python):
        print("SKIP: no interpreter %s (scripts/install-deps --torch2 makes the torch 2.x venv)"
              % args.python)
        return SKIP
    if args.wheel:
        args.tuttirun = os.path.join(os.path.dirname(args.python), "tuttirun")
    fn = {"pytest": cmd_pytest, "c-example": cmd_c_example, "main-job": cmd_main_job}[args.what]
    return fn(args)


if __name__ == "__main__":
    sys.exit(main())

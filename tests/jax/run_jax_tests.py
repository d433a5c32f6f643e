#!/usr/bin/python3
"""Runs the tutti.jax tests under tuttirun with the JAX venv's Python (ctest calls this).

    run_jax_tests.py pytest  --np 3 --tuttirun T --library L --jax-library JL --python P
    run_jax_tests.py example --np 2 --tuttirun T --library L --jax-library JL --python P
    run_jax_tests.py wheel --np 2 --tuttirun T --library L --jax-library JL --python P
    run_jax_tests.py elastic-kill --tuttirun T --library L --jax-library JL --python P

pytest: tests/jax on every rank of a job. example: a short run of
examples/jax_fashion_mnist.py whose loss decreases, whose parameter checksums
agree on every rank and whose test accuracy is far above chance. wheel:
wheel_job.py with the venv's installed tutti only (its tuttirun, libtutti.so
and handler library). elastic-kill: tests/python/elastic_example_jobs.py's
kill case (3 elastic workers, one SIGKILLed after the commit of step 20, the
survivors go on at size 2 from their last commit with equal checksums) on
elastic_worker.py. Exits 77
(ctest's skip) with a message when the Python has no jax or the handler
library was not built, non-zero with a message saying what was wrong otherwise.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SKIP = 77

sys.path.insert(0, os.path.join(REPO, "tests", "python"))
import run_job_tests  # noqa: E402
from run_job_tests import run  # noqa: E402 (runs a command, prints and returns its output)


def skip_reason(args):
    return run_job_tests.framework_skip_reason(
        args.python, ["jax", "optax", "pytest"], args.jax_library, "--jax", "TUTTI_JAX_PYTHON")


def job_env(args):
    env = run_job_tests.job_env(args)  # TUTTI_LIBRARY, PYTHONPATH, timeouts
    env["TUTTI_JAX_LIBRARY"] = os.path.abspath(args.jax_library)
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def cmd_pytest(args):
    rc, _ = run([args.tuttirun, "-np", str(args.np), args.python, "-m", "pytest", "-q", "-x",
                 "-p", "no:cacheprovider", HERE], job_env(args), args.timeout)
    return rc


def cmd_example(args):
    rc, out = run([args.tuttirun, "-np", str(args.np), args.python,
                   os.path.join(REPO, "examples", "jax_fashion_mnist.py"), "--epochs", "1",
                   "--train-fraction", "0.2", "--log-interval", "10"], job_env(args),
                  args.timeout)
    # A fifth of an epoch of a 10-class problem: far above chance (10 %).
    return run_job_tests.check_training_job(rc, out, args.np, "jax example", min_accuracy=60.0)


def cmd_elastic_kill(args):
    """elastic_worker.py in tests/python/elastic_example_jobs.py's kill case."""
    import elastic_example_jobs as jobs  # tests/python, on sys.path above
    env = job_env(args)
    return jobs.kill_with_worker(args, args.python, os.path.join(HERE, "elastic_worker.py"),
                                 {k: env[k] for k in ("TUTTI_JAX_LIBRARY", "JAX_PLATFORMS")})


def cmd_wheel(args):
    """wheel_job.py with the venv's installed tutti (scripts/install-deps --jax
    installs this repo's wheel into it with --no-build-isolation)."""
    return run_job_tests.run_installed_wheel(
        args.python, args.np, os.path.join(HERE, "wheel_job.py"), job_env(args), args.timeout,
        "scripts/install-deps --jax")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["pytest", "example", "wheel", "elastic-kill"])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--tuttirun", required=True)
    p.add_argument("--library", required=True, help="libtutti.so (TUTTI_LIBRARY)")
    p.add_argument("--jax-library", default="", help="libtutti_jax.so (TUTTI_JAX_LIBRARY)")
    p.add_argument("--python", required=True, help="a Python with jax (build/jax-venv)")
    p.add_argument("--timeout", type=int, default=540, help="seconds")
    args = p.parse_args()
    reason = skip_reason(args)
    if reason:
        print("SKIP: " + reason)
        return SKIP
    return {"pytest": cmd_pytest, "example": cmd_example, "wheel": cmd_wheel,
            "elastic-kill": cmd_elastic_kill}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())

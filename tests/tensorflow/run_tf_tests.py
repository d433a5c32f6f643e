#!/usr/bin/python3
"""Runs the tutti.tensorflow tests under tuttirun with the TensorFlow venv's
Python (ctest calls this).

    run_tf_tests.py pytest  --np 3 --tuttirun T --library L --tf-library TL --python P
    run_tf_tests.py example --np 2 --tuttirun T --library L --tf-library TL --python P
    run_tf_tests.py peer-lost --np 2 --tuttirun T --library L --tf-library TL --python P
    run_tf_tests.py elastic-kill --tuttirun T --library L --tf-library TL --python P
    run_tf_tests.py wheel --np 2 --tuttirun T --library L --tf-library TL --python P
    run_tf_tests.py keras-elastic-kill --tuttirun T --library L --tf-library TL --python P
    run_tf_tests.py tf1-mode --np 2 --tuttirun T --library L --tf-library TL --python P

pytest: tests/tensorflow on every rank of a job. example: one short epoch of
examples/tensorflow_fashion_mnist.py whose loss decreases and whose weight
checksums agree on every rank. peer-lost: ranks started without tuttirun (which
would stop the others), the last SIGKILLs itself, the others' ops must fail
with UnavailableError within TUTTI_TIMEOUT_SECONDS (peer_lost_worker.py).
elastic-kill: tests/python/elastic_example_jobs.py's kill case (3 elastic
workers, one SIGKILLed after the commit of step 20, the survivors go on at
size 2 from their last commit with equal checksums) on elastic_worker.py;
keras-elastic-kill: the same on keras_elastic_worker.py (model.fit with
KerasState and the elastic callbacks). tf1-mode: tf1_mode_worker.py on every
rank, a script under tf.compat.v1.disable_v2_behavior() (the TF1
DistributedOptimizer with aggregation, broadcast_global_variables,
broadcast_, the object functions in a session), which can not share a
process with the TF2 tests: each rank prints "tf1-mode: ok". Exits 77
(ctest's skip) with a message when the Python has no TensorFlow or the op
library was not built, non-zero with a message saying what was wrong
otherwise.
"""

import argparse
import os
import re
import secrets
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SKIP = 77

sys.path.insert(0, os.path.join(REPO, "tests", "python"))
import run_job_tests  # noqa: E402
from run_job_tests import run  # noqa: E402 (runs a command, prints and returns its output)


def skip_reason(args):
    return run_job_tests.framework_skip_reason(
        args.python, ["tensorflow", "keras", "pytest"], args.tf_library, "--tensorflow",
        "TUTTI_TENSORFLOW_PYTHON")


def job_env(args):
    env = run_job_tests.job_env(args)  # TUTTI_LIBRARY, PYTHONPATH, timeouts
    env["TUTTI_TF_LIBRARY"] = os.path.abspath(args.tf_library)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def cmd_pytest(args):
    rc, _ = run([args.tuttirun, "-np", str(args.np), args.python, "-m", "pytest", "-q", "-x",
                 "-p", "no:cacheprovider", HERE], job_env(args), args.timeout)
    return rc


def cmd_example(args):
    rc, out = run([args.tuttirun, "-np", str(args.np), args.python,
                   os.path.join(REPO, "examples", "tensorflow_fashion_mnist.py"), "--epochs", "1",
                   "--train-fraction", "0.1", "--log-interval", "10"], job_env(args), args.timeout)
    # One tenth of an epoch of a 10-class problem: far above chance (10 %).
    return run_job_tests.check_training_job(rc, out, args.np, "tensorflow example",
                                            min_accuracy=50.0)


def cmd_tf1_mode(args):
    rc, out = run([args.tuttirun, "-np", str(args.np), args.python,
                   os.path.join(HERE, "tf1_mode_worker.py")], job_env(args), args.timeout)
    ok = len(re.findall(r"tf1-mode: ok", out))
    if rc != 0 or ok != args.np:
        print("FAIL: the job exited with %d, %d of %d ranks ok" % (rc, ok, args.np))
        return 1
    return 0


def cmd_peer_lost(args):
    timeout_s = 10
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(job_env(args), TUTTI_SIZE=str(args.np), TUTTI_RENDEZVOUS_ADDR="127.0.0.1",
               TUTTI_RENDEZVOUS_PORT=str(port), TUTTI_SECRET=secrets.token_hex(8),
               TUTTI_TIMEOUT_SECONDS=str(timeout_s), TUTTI_LOCAL_SIZE=str(args.np))
    worker = os.path.join(HERE, "peer_lost_worker.py")
    procs = [subprocess.Popen([args.python, worker], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=dict(env, TUTTI_RANK=str(r), TUTTI_LOCAL_RANK=str(r)))
             for r in range(args.np)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=args.timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print("FAIL: a rank hung after its peer died (no exit within %d s)" % args.timeout)
            return 1
    out = "".join(outs)
    print(out)
    times = [float(t) for t in re.findall(r"failed after ([0-9.]+) s", out)]
    codes = [p.returncode for p in procs]
    if codes[-1] != -9 or any(c != 0 for c in codes[:-1]) or len(times) != 2 * (args.np - 1):
        print("FAIL: exit codes %s (want 0 for survivors, -9 for the victim), %d errors"
              % (codes, len(times)))
        return 1
    if max(times) > timeout_s:
        print("FAIL: an error came after %.2f s, TUTTI_TIMEOUT_SECONDS is %d" % (max(times),
                                                                                   timeout_s))
        return 1
    print("peer-lost: %d survivors' ops failed, each within %.2f s of its start"
          % (args.np - 1, max(times)))
    return 0


def cmd_wheel(args):
    """wheel_job.py with the venv's installed tutti (scripts/install-deps
    --tensorflow installs this repo's wheel into it with --no-build-isolation)."""
    return run_job_tests.run_installed_wheel(
        args.python, args.np, os.path.join(HERE, "wheel_job.py"), job_env(args), args.timeout,
        "scripts/install-deps --tensorflow")


def cmd_elastic_kill(args, worker="elastic_worker.py"):
    import elastic_example_jobs as jobs  # tests/python, on sys.path above
    env = job_env(args)
    return jobs.kill_with_worker(args, args.python, os.path.join(HERE, worker),
                                 {k: env[k] for k in ("TUTTI_TF_LIBRARY", "TF_CPP_MIN_LOG_LEVEL")})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["pytest", "example", "peer-lost", "elastic-kill",
                                    "keras-elastic-kill", "wheel", "tf1-mode"])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--tuttirun", required=True)
    p.add_argument("--library", required=True, help="libtutti.so (TUTTI_LIBRARY)")
    p.add_argument("--tf-library", default="", help="libtutti_tensorflow.so (TUTTI_TF_LIBRARY)")
    p.add_argument("--python", required=True, help="a Python with TensorFlow (build/tf-venv)")
    p.add_argument("--timeout", type=int, default=540, help="seconds")
    args = p.parse_args()
    reason = skip_reason(args)
    if reason:
        print("SKIP: " + reason)
        return SKIP
    return {"pytest": cmd_pytest, "example": cmd_example,
            "peer-lost": cmd_peer_lost, "elastic-kill": cmd_elastic_kill,
            "keras-elastic-kill": lambda a: cmd_elastic_kill(a, "keras_elastic_worker.py"),
            "wheel": cmd_wheel, "tf1-mode": cmd_tf1_mode,
            }[args.what](args)


if __name__ == "__main__":
    sys.exit(main())

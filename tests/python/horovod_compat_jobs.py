#!/usr/bin/python3
"""Runs unchanged Horovod scripts on tutti through tutti.horovod_compat (ctest
calls this; docs/horovod.md, "Running an unchanged Horovod script").

    horovod_compat_jobs.py example --np 2 --tuttirun T --library L
    horovod_compat_jobs.py runner --library L

example: examples/horovod_pytorch_fashion_mnist.py (`import horovod.torch as
hvd`, not a line changed) under `tuttirun --horovod-compat` for 1 epoch on a
tenth of the training set at lr 0.05 (about 64 % test accuracy on 2 ranks):
rank 0's training loss must decrease, the test accuracy must be above 50 %
(chance: 10 %), and every rank's parameter checksum must agree.
runner: `python3 -m tutti.horovod_compat` maps horovod.torch, its
submodules and horovod.common.exceptions onto tutti's modules; the script
sees its own sys.argv; without the runner `import horovod` fails (nothing is
shadowed); a fake installed Horovod is refused (exit 2, naming it) unless
--shadow-real-horovod or TUTTI_HOROVOD_COMPAT_SHADOW=1.
Exits non-zero with a message saying what was wrong.
"""

import argparse
import os
import re
import sys
import tempfile

from run_job_tests import run  # prints the command and its output; exits on a timeout

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
EXAMPLE = os.path.join(REPO, "examples", "horovod_pytorch_fashion_mnist.py")

PROBE = r'''
import sys
import horovod
import horovod.torch as hvd
import horovod.torch.mpi_ops as mpi_ops
from horovod.torch.mpi_ops import synchronize, Sum, Average, Adasum, allreduce_async_, poll
from horovod.torch.compression import Compression
from horovod.torch.elastic import run, TorchState, ElasticSampler
from horovod.torch.sync_batch_norm import SyncBatchNorm
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
import tutti.errors
import tutti.torch
import tutti.torch.elastic
assert hvd is tutti.torch and mpi_ops is tutti.torch.mpi_ops
assert sys.modules["horovod.torch.elastic"] is tutti.torch.elastic
assert HorovodInternalError is tutti.errors.HorovodInternalError
assert synchronize is tutti.torch.synchronize and Compression is tutti.torch.Compression
hvd.init()
import torch
assert hvd.allreduce(torch.tensor([3.0]), op=Sum).item() == 3.0 * hvd.size()
try:
    import horovod.runner
except ImportError as e:
    assert "tuttirun" in str(e), e
else:
    raise AssertionError("horovod.runner imported")
print("PROBE OK", horovod.__version__, sys.argv[1:])
'''


def job_env(args, extra_path=None):
    env = dict(os.environ)
    if args.library:
        env["TUTTI_LIBRARY"] = os.path.abspath(args.library)
    paths = ([extra_path] if extra_path else []) + [os.path.join(REPO, "bindings", "python")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("TUTTI_HOROVOD_COMPAT_SHADOW", None)
    env.setdefault("TUTTI_TIMEOUT_SECONDS", "60")
    return env


def fail(message):
    print("FAIL: " + message)
    return 1


def cmd_example(args):
    rc, out = run([args.tuttirun, "-np", str(args.np), "--horovod-compat", PYTHON, EXAMPLE,
                   "--epochs", "1", "--train-fraction", "0.1", "--test-fraction", "0.2",
                   "--log-interval", "5", "--lr", "0.05"], job_env(args), 600)
    if rc != 0:
        return fail("the job exited with %d" % rc)
    losses = [float(x) for x in re.findall(r"Train Epoch: 1 \[\d+/\d+ \(\d+%\)\]\s+Loss: ([0-9.]+)",
                                           out)]
    accuracy = re.findall(r"Test set: Average loss: [0-9.]+, Accuracy: ([0-9.]+)%", out)
    sums = re.findall(r"rank (\d+): parameter checksum (\S+)", out)
    if len(losses) < 3 or not sum(losses[-2:]) < sum(losses[:2]):
        return fail("rank 0's loss did not decrease: %s" % losses)
    if len(accuracy) != 1 or not float(accuracy[0]) > 50.0:
        return fail("test accuracy %s: expected one line above 50%% (chance: 10%%)" % accuracy)
    if sorted(int(r) for r, _ in sums) != list(range(args.np)) or len({s for _, s in sums}) != 1:
        return fail("parameter checksums differ or are missing: %s" % sums)
    print("horovod example: loss %.4f -> %.4f, accuracy %s%%, checksum %s on %d ranks"
          % (losses[0], losses[-1], accuracy[0], sums[0][1], args.np))
    return 0


def cmd_runner(args):
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        runner = [PYTHON, "-m", "tutti.horovod_compat"]
        rc, out = run(runner + [probe, "--flag", "x"], job_env(args), 300)
        if rc != 0 or "PROBE OK 0.28.1 ['--flag', 'x']" not in out:
            return fail("the probe through the runner: exit %d" % rc)
        rc, out = run([PYTHON, probe], job_env(args), 300)
        if rc == 0 or "No module named 'horovod'" not in out:
            return fail("without the runner `import horovod` must fail (exit %d)" % rc)
        fake = os.path.join(tmp, "site", "horovod")
        os.makedirs(fake)
        with open(os.path.join(fake, "__init__.py"), "w") as f:
            f.write("raise SystemExit('the fake real Horovod was imported')\n")
        env = job_env(args, extra_path=os.path.dirname(fake))
        rc, out = run(runner + [probe], env, 300)
        if rc != 2 or "a real Horovod is installed (%s" % fake not in out:
            return fail("an installed Horovod must be refused with exit 2 (got %d)" % rc)
        rc, out = run(runner + ["--shadow-real-horovod", probe], env, 300)
        if rc != 0 or "PROBE OK" not in out:
            return fail("--shadow-real-horovod must run on tutti (exit %d)" % rc)
        env["TUTTI_HOROVOD_COMPAT_SHADOW"] = "1"
        rc, out = run(runner + [probe], env, 300)
        if rc != 0 or "PROBE OK" not in out:
            return fail("TUTTI_HOROVOD_COMPAT_SHADOW=1 must run on tutti (exit %d)" % rc)
    print("horovod_compat runner: OK")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["example", "runner"])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--tuttirun")
    p.add_argument("--library", help="libtutti.so to load (TUTTI_LIBRARY)")
    args = p.parse_args()
    return {"example": cmd_example, "runner": cmd_runner}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())

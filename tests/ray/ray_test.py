#!/usr/bin/python3
"""tutti.ray.RayExecutor on a local Ray cluster (Ray from PyPI in the venv of
`scripts/install-deps --ray`):

  1. placement_env: local and cross ranks from the workers' nodes;
  2. start() 2 workers with an executable class; execute() sees it;
  3. run() trains a small model with DistributedOptimizer on each worker's
     own data: the ranks are 0 and 1 on one host, the loss decreases, and the
     parameters end equal (to the bit) on both workers;
  4. an exception in a worker's function reaches run();
  5. shutdown() ends the workers.

    ray_test.py --venv build/ray-venv --library build/bindings/c/libtutti.so

Ray's state (session files, auth token: HOME) stays in a temporary
directory. Exits 77 (ctest's skip) when the venv has no Ray, except under
CI=true, where scripts/test installs it.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class Model:
    """The executable class: each worker builds one in start()."""

    def __init__(self, tag):
        self.tag = tag


def train(steps):
    import torch

    import tutti.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(100 + hvd.rank())  # different start and data on each rank
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    x = torch.randn(32, 6)
    y = x[:, :1] - 2 * x[:, 1:2]
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = [p.detach().flatten().tolist() for p in model.parameters()]
    out = dict(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
               local_size=hvd.local_size(), cross_size=hvd.cross_size(),
               first=losses[0], last=losses[-1], params=params)
    hvd.shutdown()
    return out


def fails():
    raise KeyError("raised in a worker")


def check(ok, msg):
    if not ok:
        sys.exit("FAIL: " + msg)


def test_placement_env(placement_env):
    envs = placement_env(["10.0.0.1", "10.0.0.2", "10.0.0.1"])
    check([e["TUTTI_LOCAL_RANK"] for e in envs] == ["0", "0", "1"], "local ranks %s" % envs)
    check([e["TUTTI_LOCAL_SIZE"] for e in envs] == ["2", "1", "2"], "local sizes %s" % envs)
    check([e["TUTTI_CROSS_RANK"] for e in envs] == ["0", "1", "0"], "cross ranks %s" % envs)
    check(all(e["TUTTI_CROSS_SIZE"] == "2" and e["TUTTI_SIZE"] == "3" for e in envs),
          "sizes %s" % envs)


def main_in_venv(args):
    import ray

    from tutti.ray import RayExecutor, placement_env
    test_placement_env(placement_env)
    try:
        RayExecutor(num_workers=0)
        check(False, "num_workers=0 was accepted")
    except ValueError as e:
        check("num_workers" in str(e), "unclear error: %s" % e)

    env_vars = {"TUTTI_LIBRARY": os.path.abspath(args.library),
                "PYTHONPATH": os.path.join(REPO, "bindings", "python") + os.pathsep + HERE}
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=os.path.join(args.tmp, "ray"),
             runtime_env={"env_vars": env_vars}, log_to_driver=True)
    try:
        executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=2,
                               cpus_per_worker=1)
        executor.start(executable_cls=Model, executable_args=["m"])
        check(executor.execute(lambda m: m.tag) == ["m", "m"], "execute() did not see Model")
        results = executor.run(train, args=[25])
        for r in results:
            print("rank %d/%d local %d/%d: loss %.5f -> %.5f"
                  % (r["rank"], r["size"], r["local_rank"], r["local_size"], r["first"],
                     r["last"]))
        check([r["rank"] for r in results] == [0, 1], "ranks %s" % [r["rank"] for r in results])
        check(all(r["size"] == 2 and r["local_size"] == 2 and r["cross_size"] == 1
                  for r in results), "sizes: one host of 2 expected")
        check([r["local_rank"] for r in results] == [0, 1], "local ranks")
        check(all(r["last"] < r["first"] for r in results), "the loss did not decrease")
        check(results[0]["params"] == results[1]["params"], "the parameters differ")
        try:
            executor.run(fails)
            check(False, "a worker's exception did not reach run()")
        except ray.exceptions.RayTaskError as e:
            check("raised in a worker" in str(e), "wrong error: %s" % e)
        workers = list(executor.workers)
        executor.shutdown()
        check(executor.workers == [], "workers left after shutdown")
        try:
            ray.get(workers[0].node_ip.remote(), timeout=30)
            check(False, "a worker still answers after shutdown")
        except ray.exceptions.RayActorError:
            pass
    finally:
        ray.shutdown()
    print("PASS: RayExecutor trains on 2 actors with equal parameters")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--venv", required=True)
    p.add_argument("--library", required=True)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.tmp:  # the second stage, in the venv's interpreter
        sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
        return main_in_venv(args)
    python = os.path.join(args.venv, "bin", "python")
    has_ray = os.access(python, os.X_OK) and subprocess.run(
        [python, "-c", "import ray"], capture_output=True).returncode == 0
    if not has_ray:
        msg = "no Ray in %s (scripts/install-deps --ray)" % args.venv
        if os.environ.get("CI") == "true":
            check(False, msg)
        print("SKIP: " + msg)
        return 77
    tmp = tempfile.mkdtemp(prefix="tutti-ray-test.")
    env = dict(os.environ, HOME=tmp, RAY_USAGE_STATS_ENABLED="0")
    try:
        return subprocess.run([python, os.path.abspath(__file__), "--venv", args.venv,
                               "--library", args.library, "--tmp", tmp], env=env,
                              timeout=500).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

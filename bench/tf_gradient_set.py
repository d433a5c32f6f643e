#!/usr/bin/env python3
"""ResNet-50's gradient set (bench/resnet50_shapes.h: 161 float32 tensors,
25.6 M parameters) summed over the ranks per step: tutti.tensorflow against
TensorFlow's MultiWorkerMirroredStrategy (collective all-reduce, ring, over
gRPC), the same tensors, the same machine (BENCHMARKS.md, "TensorFlow").

    bench/tf_gradient_set.py --np 2 --tuttirun build/launcher/tuttirun   # both, np 2
    bench/tf_gradient_set.py --np 4 --tuttirun build/launcher/tuttirun

Run with the TensorFlow venv's Python (build/tf-venv/bin/python). A step is
one tf.function that reduces every tensor: 161 TuttiAllreduce ops (fused by
tutti), or one replica-context all_reduce of the list (packed by
TensorFlow). Each side checks its first step's sums. Prints, per library,
the median [min-max] ms per step over --steps timed steps after --warmup.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_common import resnet50_shapes  # noqa: E402


def make_tensors(tf, rank):
    return [tf.fill(shape, float(rank + 1)) for shape in resnet50_shapes()]


def report(name, size, seconds):
    ms = sorted(s * 1000 for s in seconds)
    print("RESULT %s np %d: %.1f ms per step (median) [%.1f-%.1f] over %d steps"
          % (name, size, statistics.median(ms), ms[0], ms[-1], len(ms)), flush=True)


def timed(step, tensors, args, check):
    check(step(tensors))
    for _ in range(args.warmup):
        step(tensors)
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        out = step(tensors)
        float(out[-1][0])  # the step is done when its last result is readable
        seconds.append(time.perf_counter() - start)
    return seconds


def worker_tutti(args):
    import tensorflow as tf
    import tutti.tensorflow as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    step = tf.function(lambda ts: [hvd.allreduce(t, op=hvd.Sum) for t in ts])
    want = size * (size + 1) / 2

    def check(out):
        bad = [i for i, t in enumerate(out) if float(tf.reduce_max(tf.abs(t - want))) != 0.0]
        if bad:
            sys.exit("tutti: wrong sums in tensors %s" % bad[:5])

    seconds = timed(step, make_tensors(tf, rank), args, check)
    worst = hvd.allreduce(tf.constant(seconds), op=hvd.Max).numpy()  # the slowest rank per step
    if rank == 0:
        report("tutti.tensorflow", size, list(worst))
    hvd.shutdown()


def worker_mwms(args):
    import tensorflow as tf
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    size = strategy.num_replicas_in_sync
    # The replicas' tensors as variables of the strategy (its inputs must live
    # on its devices); their initial values are made equal (1.0) on every worker.
    with strategy.scope():
        variables = [tf.Variable(tf.ones(shape)) for shape in resnet50_shapes()]

    @tf.function
    def step(vs):
        def reduce():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, [v.read_value() for v in vs])
        out = strategy.run(reduce)
        return [strategy.experimental_local_results(o)[0] for o in out]

    tensors = variables
    want = float(size)

    def check(out):
        bad = [i for i, t in enumerate(out) if float(tf.reduce_max(tf.abs(t - want))) != 0.0]
        if bad:
            sys.exit("MultiWorkerMirroredStrategy: wrong sums in tensors %s" % bad[:5])

    seconds = timed(step, tensors, args, check)
    if task == 0:
        report("MultiWorkerMirroredStrategy", size, seconds)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def launch_mwms(args):
    workers = ["127.0.0.1:%d" % p for p in free_ports(args.np)]
    procs = []
    for i in range(args.np):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}),
            OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // args.np)))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "mwms"] + common(args),
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    return collect(procs)


def launch_tutti(args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "bindings", "python"))
    proc = subprocess.Popen([args.tuttirun, "-np", str(args.np), sys.executable, __file__,
                             "--worker", "tutti"] + common(args), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return collect([proc])


def collect(procs):
    out = "".join(p.communicate()[0] for p in procs)
    results = re.findall(r"RESULT .*", out)
    if any(p.returncode for p in procs) or not results:
        print(out)
        sys.exit("a run failed (exit codes %s)" % [p.returncode for p in procs])
    return results


def common(args):
    return ["--steps", str(args.steps), "--warmup", str(args.warmup)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--tuttirun", default=os.path.join(REPO, "build", "launcher", "tuttirun"))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--only", choices=["tutti", "mwms"], help="run one side only")
    p.add_argument("--worker", choices=["tutti", "mwms"], help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.worker:
        return (worker_tutti if args.worker == "tutti" else worker_mwms)(args)
    for side, launch in (("tutti", launch_tutti), ("mwms", launch_mwms)):
        if args.only in (None, side):
            for line in launch(args):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Data-parallel Keras training of a small CNN on Fashion-MNIST with tutti.tensorflow.

    tuttirun -np 4 build/tf-venv/bin/python examples/tensorflow_fashion_mnist.py

A Horovod Keras script with one import changed: model.fit with
DistributedOptimizer (Adam), BroadcastGlobalVariablesCallback,
MetricAverageCallback and LearningRateWarmupCallback. Each rank trains on its
shard of the 60,000 training images (the same permutation on every rank,
reshuffled within the shard every epoch); the learning rate is --lr for a
global batch of 64, scaled linearly with the global batch (warmed up from
lr / size over the first epoch). Test accuracy is summed over the ranks'
shards of the 10,000 test images. Every rank prints a checksum of its
weights: they must all agree.

Data: the IDX files of the Debian package dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist), or --data-dir. TensorFlow: the venv of
scripts/install-deps --tensorflow (build/tf-venv).
"""

import argparse
import gzip
import hashlib
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tutti.tensorflow.keras as hvd  # noqa: E402
from tutti.tensorflow import allreduce, Sum  # noqa: E402

NAMES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
MEAN, STD = 0.2860, 0.3530


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch (default: 32)")
    p.add_argument("--lr", type=float, default=0.001,
                   help="Adam learning rate for a global batch of 64 (default: 0.001)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--train-fraction", type=float, default=1.0,
                   help="use this fraction of the training set (short runs)")
    p.add_argument("--log-interval", type=int, default=100, help="steps between progress lines")
    p.add_argument("--fp16-allreduce", action="store_true", help="Compression.fp16 for gradients")
    return p.parse_args()


def idx_array(path):
    """A gzipped IDX file of unsigned bytes as a numpy array of its shape."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if raw[0:2] != b"\0\0" or raw[2] != 0x08:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data(data_dir):
    missing = [n for n in NAMES if not os.path.exists(os.path.join(data_dir, n))]
    if missing:
        raise SystemExit("error: Fashion-MNIST not found in %s (missing: %s). Install the Debian "
                         "package dataset-fashion-mnist or pass --data-dir."
                         % (data_dir, ", ".join(missing)))
    tx, ty, vx, vy = (idx_array(os.path.join(data_dir, n)) for n in NAMES)

    def images(a):
        return ((a.astype(np.float32) / 255.0 - MEAN) / STD)[..., None]

    return images(tx), ty.astype(np.int64), images(vx), vy.astype(np.int64)


def make_model():
    """[N, 28, 28, 1] float32 -> [N, 10] logits: two conv blocks and a 128-unit layer."""
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])


class Progress(keras.callbacks.Callback):
    """Rank 0 prints the mean loss of every log_interval steps."""

    def __init__(self, interval, steps, global_batch):
        super().__init__()
        self.interval, self.steps, self.global_batch = interval, steps, global_batch
        self.losses, self.start = [], time.time()

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))  # Keras 3: the running mean of the epoch
        if hvd.rank() == 0 and (batch + 1) % self.interval == 0:
            now = time.time()
            print("step %d/%d loss %.4f %.0f images/s"
                  % (batch + 1, self.steps, self.losses[-1],
                     self.interval * self.global_batch / (now - self.start)), flush=True)
            self.start = now


def test_accuracy(model, images, labels):
    """Accuracy over the ranks' shards of the test set, counts summed with allreduce."""
    shard = np.arange(hvd.rank(), images.shape[0], hvd.size())
    logits = model.predict(images[shard], batch_size=1000, verbose=0)
    correct = float((logits.argmax(1) == labels[shard]).sum())
    totals = allreduce(tf.constant([correct, float(shard.size)], tf.float64), op=Sum)
    return float(totals[0] / totals[1])


def checksum(model):
    """sha256 of every weight's bytes, in model.weights order, and their float sum."""
    h, total = hashlib.sha256(), 0.0
    for w in model.weights:
        a = keras.ops.convert_to_numpy(w)
        h.update(a.tobytes())
        total += float(a.astype(np.float64).sum())
    return h.hexdigest()[:16], total


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    threads = int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // size))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    keras.utils.set_random_seed(args.seed + rank)  # different on purpose: the broadcast fixes it

    train_x, train_y, test_x, test_y = load_data(args.data_dir)
    global_batch = args.batch_size * size
    steps = int(train_x.shape[0] * args.train_fraction) // global_batch
    perm = np.random.default_rng(args.seed).permutation(train_x.shape[0])[:steps * global_batch]
    shard = perm[rank::size]  # steps * batch_size images on every rank
    lr = args.lr * global_batch / 64

    model = make_model()
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(lr),
                                                     compression=compression),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=False)
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=1, verbose=1),
        Progress(args.log_interval, steps, global_batch),
    ]
    if rank == 0:
        print("tutti.tensorflow: %d ranks, %d thread(s) each; TensorFlow %s, Keras %s; global "
              "batch %d, lr %.4g, %d steps/epoch" % (size, threads, tf.__version__,
                                                     keras.__version__, global_batch, lr, steps),
              flush=True)
    start = time.time()
    for epoch in range(args.epochs):
        history = model.fit(train_x[shard], train_y[shard], batch_size=args.batch_size,
                            initial_epoch=epoch, epochs=epoch + 1, shuffle=True,
                            callbacks=callbacks, verbose=0)
        accuracy = test_accuracy(model, test_x, test_y)
        if rank == 0:
            print("epoch %d: train loss %.4f (mean over ranks), test accuracy %.2f%% (%.0f s)"
                  % (epoch + 1, history.history["loss"][-1], 100 * accuracy,
                     time.time() - start), flush=True)

    digest, total = checksum(model)
    print("rank %d: parameter checksum %s (sum %.10e)" % (rank, digest, total), flush=True)
    if rank == 0:
        print("done: %d epochs in %.1f s, final test accuracy %.2f%%"
              % (args.epochs, time.time() - start, 100 * accuracy), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())

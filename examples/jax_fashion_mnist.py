#!/usr/bin/env python3
"""Data-parallel training of a small CNN on Fashion-MNIST with JAX, optax and tutti.jax.

    tuttirun -np 2 build/jax-venv/bin/python examples/jax_fashion_mnist.py --epochs 3

Each rank trains on its shard of the 60,000 training images (a fresh common
permutation every epoch); the jitted step computes the gradients and applies
tutti.jax.DistributedOptimizer(optax.adam), whose grouped allreduce averages
them inside the same XLA program. Parameters start from rank 0's
(broadcast_parameters). Test accuracy counts every rank's shard of the 10,000
test images (an allreduce of the counts). At the end every rank prints a
sha256 of its parameters: equal on every rank.

Data: the IDX files of the Debian package dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist), or --data-dir.
"""

import argparse
import gzip
import hashlib
import os
import struct
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import tutti.jax as hvd

FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
MEAN, STD = 0.2860, 0.3530


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                   help="folder with the four IDX files (default: Debian's)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per-rank batch (default: 64)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate at one rank; "
                   "multiplied by the number of ranks (the global batch grows with it)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--train-fraction", type=float, default=1.0,
                   help="use this fraction of each epoch's steps (short runs, tests)")
    p.add_argument("--log-interval", type=int, default=100, help="steps between progress lines")
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="tutti.Compression.fp16 for the gradients")
    return p.parse_args()


def read_idx(path):
    """Reads a gzipped IDX file into a uint8 numpy array of its shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_data(data_dir):
    """(train images, train labels, test images, test labels): images float32
    [N, 28, 28, 1] normalised, labels int32 [N]."""
    missing = [f for f in FILES.values() if not os.path.exists(os.path.join(data_dir, f))]
    if missing:
        raise SystemExit(
            "error: Fashion-MNIST not found in %s (missing: %s). Install the Debian package "
            "dataset-fashion-mnist (sudo apt-get install dataset-fashion-mnist) or point "
            "--data-dir at a directory with those files." % (data_dir, ", ".join(missing)))
    a = {k: read_idx(os.path.join(data_dir, f)) for k, f in FILES.items()}

    def images(x):
        return ((x.astype(np.float32) / 255.0 - MEAN) / STD)[..., None]

    return (images(a["train_images"]), a["train_labels"].astype(np.int32),
            images(a["test_images"]), a["test_labels"].astype(np.int32))


def init_params(key):
    """Two 3x3 conv layers (16 and 32 channels, each followed by 2x2 max
    pooling), a 128-unit hidden layer and 10 logits; He-initialised."""
    k = jax.random.split(key, 4)

    def he(key, shape, fan_in):
        return jax.random.normal(key, shape, jnp.float32) * jnp.sqrt(2.0 / fan_in)

    return {
        "conv1": {"w": he(k[0], (3, 3, 1, 16), 9), "b": jnp.zeros(16)},
        "conv2": {"w": he(k[1], (3, 3, 16, 32), 144), "b": jnp.zeros(32)},
        "dense": {"w": he(k[2], (7 * 7 * 32, 128), 7 * 7 * 32), "b": jnp.zeros(128)},
        "out": {"w": he(k[3], (128, 10), 128), "b": jnp.zeros(10)},
    }


def forward(params, x):
    """Logits [N, 10] of images x [N, 28, 28, 1]."""
    for layer in ("conv1", "conv2"):
        x = jax.lax.conv_general_dilated(x, params[layer]["w"], (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        x = jax.nn.relu(x + params[layer]["b"])
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(x @ params["dense"]["w"] + params["dense"]["b"])
    return x @ params["out"]["w"] + params["out"]["b"]


def loss_fn(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(forward(params, x), y).mean()


def checksum(params):
    """sha256 of every parameter's bytes in the pytree's leaf order, and their float sum."""
    h = hashlib.sha256()
    total = 0.0
    for leaf in jax.tree_util.tree_leaves(params):
        a = np.asarray(leaf)
        h.update(a.tobytes())
        total += float(a.astype(np.float64).sum())
    return h.hexdigest()[:16], total


def evaluate(params, images, labels, rank, size):
    """Accuracy over every rank's shard of the test set, the same on every rank."""
    predict = jax.jit(lambda p, x: jnp.argmax(forward(p, x), axis=1))
    shard = slice(rank, None, size)
    correct = 0
    for i in range(0, len(labels[shard]), 1000):
        x, y = images[shard][i:i + 1000], labels[shard][i:i + 1000]
        correct += int(np.sum(np.asarray(predict(params, x)) == y))
    counts = hvd.allreduce(jnp.asarray([correct, len(labels[shard])], jnp.int32), op=hvd.Sum)
    return 100.0 * int(counts[0]) / int(counts[1])


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    train_x, train_y, test_x, test_y = load_data(args.data_dir)
    params = hvd.broadcast_parameters(init_params(jax.random.PRNGKey(args.seed + rank)), 0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    tx = hvd.DistributedOptimizer(optax.adam(args.lr * size), compression=compression)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    per_epoch = len(train_y) // (args.batch_size * size)
    steps = max(1, int(per_epoch * args.train_fraction))
    if rank == 0:
        print("ranks %d, per-rank batch %d, %d steps per epoch, %d epochs"
              % (size, args.batch_size, steps, args.epochs), flush=True)
    start = time.time()
    for epoch in range(args.epochs):
        order = np.random.RandomState(args.seed + epoch).permutation(len(train_y))
        mine = order[rank::size]
        for i in range(steps):
            idx = np.sort(mine[i * args.batch_size:(i + 1) * args.batch_size])
            params, opt_state, loss = step(params, opt_state, train_x[idx], train_y[idx])
            if rank == 0 and (i % args.log_interval == 0 or i == steps - 1):
                print("epoch %d step %d/%d loss %.4f" % (epoch + 1, i + 1, steps, float(loss)),
                      flush=True)
        accuracy = evaluate(params, test_x, test_y, rank, size)
        if rank == 0:
            print("epoch %d: test accuracy %.2f%% (%.1f s)" % (epoch + 1, accuracy,
                                                              time.time() - start), flush=True)
    digest, total = checksum(params)
    print("rank %d: parameter checksum %s (sum %.6f)" % (rank, digest, total), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()

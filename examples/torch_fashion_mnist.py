#!/usr/bin/python3
"""Data-parallel training of a small CNN on Fashion-MNIST with tutti.

    tuttirun -np 4 /usr/bin/python3 examples/torch_fashion_mnist.py --epochs 2

Each rank trains on its shard of the 60,000 training images (a fresh common
permutation every epoch), gradients are averaged by tutti's
DistributedOptimizer, and test accuracy is averaged over the ranks' shards of
the 10,000 test images. The learning rate grows linearly with the global batch
(per-rank batch x ranks), i.e. with the world size at a fixed per-rank batch:
`-np 4` (per-rank batch 32) and `-np 1 --batch-size 128` run the same recipe,
with the learning rate decaying along a cosine over the run.

Data: the IDX files of the Debian package dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist), or --data-dir.
"""

import argparse
import gzip
import hashlib
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import tutti
import tutti.torch as hvd

FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
MEAN, STD = 0.2860, 0.3530
REFERENCE_BATCH = 64  # --lr is the learning rate for a global batch of this size


def common_args(description):
    """The flags both Fashion-MNIST examples take (this one and the elastic one)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                   help="directory with the four IDX .gz files (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch (default: 32)")
    p.add_argument("--lr", type=float, default=0.001,
                   help="Adam learning rate for a global batch of 64; scaled linearly with the "
                        "global batch (default: 0.001)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--train-fraction", type=float, default=1.0,
                   help="use this fraction of the training set (short runs)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many optimizer steps in all (0: no limit)")
    p.add_argument("--compression", default=None, metavar="SPEC",
                   help="gradient compression: none, fp16, bf16, topk:<ratio>, int8[:<block>] "
                        "(default: the job's TUTTI_COMPRESSION, i.e. tuttirun --compression)")
    return p


def parse_args():
    p = common_args(__doc__.split("\n\n")[0])
    p.add_argument("--schedule", choices=["cosine", "constant"], default="cosine",
                   help="learning rate over the run: cosine decay to 0, or constant")
    p.add_argument("--log-interval", type=int, default=50, help="steps between progress lines")
    p.add_argument("--fp16-allreduce", action="store_true", help="Compression.fp16 for gradients")
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
    missing = [f for f in FILES.values() if not os.path.exists(os.path.join(data_dir, f))]
    if missing:
        raise SystemExit(
            "error: Fashion-MNIST not found in %s (missing: %s). Install the Debian package "
            "dataset-fashion-mnist (sudo apt-get install dataset-fashion-mnist) or point "
            "--data-dir at a directory with those files." % (data_dir, ", ".join(missing)))
    arrays = {k: read_idx(os.path.join(data_dir, f)) for k, f in FILES.items()}

    def images(a):
        return ((torch.from_numpy(a.copy()).float() / 255.0 - MEAN) / STD).unsqueeze(1)

    return (images(arrays["train_images"]), torch.from_numpy(arrays["train_labels"].astype(np.int64)),
            images(arrays["test_images"]), torch.from_numpy(arrays["test_labels"].astype(np.int64)))


class Net(nn.Module):
    """Two conv blocks (32 and 64 channels) and a 128-unit hidden layer.
    Input [N, 1, 28, 28] float32; output [N, 10] logits. The hidden layer is a
    7x7 convolution over the 7x7 feature map (the same function as a Linear
    layer on the flattened map): oneDNN runs it several times faster than the
    reference BLAS behind nn.Linear on a stock Debian torch."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.hidden = nn.Conv2d(64, 128, 7)
        self.out = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.hidden(x)).flatten(1)
        return self.out(x)


def average_buffers(model):
    """Averages batch-norm running statistics over ranks (they are per-rank
    otherwise), so that every rank evaluates and ends with the same model."""
    for name, buf in model.named_buffers():
        if buf.dtype.is_floating_point:
            hvd.allreduce_(buf, op=hvd.Average, name="buffer." + name)


def evaluate(model, images, labels):
    """Accuracy over the ranks' shards of the test set, summed with allreduce."""
    model.eval()
    shard = torch.arange(hvd.rank(), images.shape[0], hvd.size())
    correct = 0
    with torch.no_grad():
        for i in range(0, shard.numel(), 1000):
            idx = shard[i:i + 1000]
            correct += (model(images[idx]).argmax(1) == labels[idx]).sum().item()
    totals = hvd.allreduce(torch.tensor([correct, shard.numel()], dtype=torch.float64),
                           op=hvd.Sum, name="eval.totals")
    model.train()
    return totals[0].item() / totals[1].item()


def checksum(model):
    """sha256 of every parameter and buffer's bytes, in state_dict order, and the float sum
    (model: a module, or a state dict of whole tensors)."""
    h = hashlib.sha256()
    total = 0.0
    for _, t in (model if isinstance(model, dict) else model.state_dict()).items():
        h.update(t.detach().contiguous().numpy().tobytes())
        total += t.double().sum().item()
    return h.hexdigest()[:16], total


def set_threads():
    # tuttirun sets OMP_NUM_THREADS = cores / local ranks; without it, share
    # the cores among the ranks on this host.
    threads = os.environ.get("OMP_NUM_THREADS")
    n = int(threads) if threads else max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(n)
    return n


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    threads = set_threads()
    torch.manual_seed(args.seed + rank)  # different on purpose: broadcast must fix it

    train_x, train_y, test_x, test_y = load_data(args.data_dir)
    n_train = int(train_x.shape[0] * args.train_fraction)
    global_batch = args.batch_size * size
    steps_per_epoch = n_train // global_batch  # the same on every rank
    lr = args.lr * global_batch / REFERENCE_BATCH

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else args.compression
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    if rank == 0:
        print("tutti %s: %d ranks, %d thread(s) each; global batch %d, lr %.4g, %d steps/epoch"
              % (tutti.library_version(), size, threads,
                 global_batch, lr, steps_per_epoch), flush=True)

    total_steps = args.epochs * steps_per_epoch
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)
    step = 0
    step_bytes, step_seconds = 0, 0.0  # this rank's bytes sent and time in training steps
    start = time.time()
    for epoch in range(1, args.epochs + 1):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)  # same permutation on every rank
        perm = torch.randperm(train_x.shape[0], generator=g)[:steps_per_epoch * global_batch]
        shard = perm[rank::size]
        epoch_start = interval_start = time.time()
        loss_sum, interval_loss, interval_steps, epoch_steps = 0.0, 0.0, 0, 0
        for i in range(steps_per_epoch):
            if args.max_steps and step >= args.max_steps:
                break
            idx = shard[i * args.batch_size:(i + 1) * args.batch_size]
            if args.schedule == "cosine":
                for group in optimizer.param_groups:
                    group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            bytes_before, step_start = hvd.bytes_sent(), time.time()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            step_seconds += time.time() - step_start
            step_bytes += hvd.bytes_sent() - bytes_before
            step += 1
            epoch_steps += 1
            loss_sum += loss.item()
            interval_loss += loss.item()
            interval_steps += 1
            if rank == 0 and (i + 1) % args.log_interval == 0:
                now = time.time()
                print("epoch %d step %d/%d loss %.4f %.0f images/s"
                      % (epoch, i + 1, steps_per_epoch, interval_loss / interval_steps,
                         interval_steps * global_batch / (now - interval_start)), flush=True)
                interval_start, interval_loss, interval_steps = now, 0.0, 0
        elapsed = time.time() - epoch_start
        mean_loss = hvd.allreduce(torch.tensor([loss_sum / max(epoch_steps, 1)]), op=hvd.Average,
                                  name="epoch.loss").item()
        average_buffers(model)
        accuracy = evaluate(model, test_x, test_y)
        if rank == 0:
            print("epoch %d: train loss %.4f, test accuracy %.2f%%, %.0f images/s (%.1f s)"
                  % (epoch, mean_loss, 100 * accuracy, epoch_steps * global_batch / elapsed,
                     elapsed), flush=True)
        if args.max_steps and step >= args.max_steps:
            break

    digest, total = checksum(model)
    hvd.barrier()
    print("rank %d: parameter checksum %s (sum %.10e)" % (rank, digest, total), flush=True)
    hvd.barrier()
    if rank == 0:
        print("done: %d steps in %.1f s, final test accuracy %.2f%%"
              % (step, time.time() - start, 100 * accuracy), flush=True)
        print("per step (rank 0): %.0f bytes sent, %.2f ms"
              % (step_bytes / max(step, 1), 1000 * step_seconds / max(step, 1)), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())

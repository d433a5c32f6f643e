"""An unmodified Horovod PyTorch script (`import horovod.torch as hvd`), in the
pattern of Horovod's examples/pytorch/pytorch_mnist.py, on Fashion-MNIST.
It uses Horovod's API only; run it on tutti without changing a line:

    tuttirun -np 2 --horovod-compat /usr/bin/python3 examples/horovod_pytorch_fashion_mnist.py
    python3 -m tutti.horovod_compat examples/horovod_pytorch_fashion_mnist.py   # one rank

(or under Horovod itself: horovodrun -np 2 python3 examples/horovod_pytorch_fashion_mnist.py).
Data: the IDX files of the Debian package dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist), or --data-dir. Prints rank 0's training
loss every --log-interval batches, the test loss and accuracy averaged over
the ranks, and on every rank a checksum of its parameters.
"""

import argparse
import gzip
import hashlib
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import horovod.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch Fashion-MNIST Example (Horovod)")
parser.add_argument("--batch-size", type=int, default=64, help="input batch size (default: 64)")
parser.add_argument("--test-batch-size", type=int, default=1000,
                    help="input batch size for testing (default: 1000)")
parser.add_argument("--epochs", type=int, default=10, help="number of epochs (default: 10)")
parser.add_argument("--lr", type=float, default=0.01, help="learning rate (default: 0.01)")
parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum (default: 0.5)")
parser.add_argument("--seed", type=int, default=42, help="random seed (default: 42)")
parser.add_argument("--log-interval", type=int, default=10,
                    help="batches between training status lines (default: 10)")
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--use-adasum", action="store_true", default=False,
                    help="use the Adasum algorithm to do the reduction")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                    help="gradient predivide factor in the optimizer (default: 1.0)")
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="directory with the four Fashion-MNIST IDX .gz files")
parser.add_argument("--train-fraction", type=float, default=1.0,
                    help="use this leading fraction of the training set (default: all)")
parser.add_argument("--test-fraction", type=float, default=1.0,
                    help="use this leading fraction of the test set (default: all)")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    _, _, ndim = struct.unpack(">HBB", data[:4])
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def dataset(data_dir, prefix, fraction):
    images = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % prefix))
    labels = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % prefix))
    n = max(1, int(len(labels) * fraction))
    x = (torch.from_numpy(images[:n].copy()).float() / 255.0 - 0.2860) / 0.3530
    y = torch.from_numpy(labels[:n].astype(np.int64))
    return torch.utils.data.TensorDataset(x.unsqueeze(1), y)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def train(epoch):
    model.train()
    # Horovod: set epoch to sampler for shuffling.
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
            # Horovod: use train_sampler to determine the number of examples in this shard.
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_sampler),
                100. * batch_idx / len(train_loader), loss.item()), flush=True)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def test():
    model.eval()
    test_loss = 0.
    test_accuracy = 0.
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.data.max(1, keepdim=True)[1]
            test_accuracy += pred.eq(target.data.view_as(pred)).float().sum().item()
    # Horovod: use test_sampler to determine the number of examples in this worker's partition.
    test_loss /= len(test_sampler)
    test_accuracy /= len(test_sampler)
    # Horovod: average metric values across workers.
    test_loss = metric_average(test_loss, "avg_loss")
    test_accuracy = metric_average(test_accuracy, "avg_accuracy")
    if hvd.rank() == 0:
        print("\nTest set: Average loss: {:.4f}, Accuracy: {:.2f}%\n".format(
            test_loss, 100. * test_accuracy), flush=True)


def checksum(model):
    h = hashlib.sha256()
    for _, t in sorted(model.state_dict().items()):
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


if __name__ == "__main__":
    args = parser.parse_args()

    # Horovod: initialize library.
    hvd.init()
    torch.manual_seed(args.seed)
    # Horovod: limit # of CPU threads to be used per worker.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    train_dataset = dataset(args.data_dir, "train", args.train_fraction)
    # Horovod: use DistributedSampler to partition the training data.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    test_dataset = dataset(args.data_dir, "t10k", args.test_fraction)
    # Horovod: use DistributedSampler to partition the test data.
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net()
    # By default, Adasum doesn't need scaling up learning rate.
    lr_scaler = hvd.size() if not args.use_adasum else 1
    # Horovod: scale learning rate by lr_scaler.
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)

    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # Horovod: (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(optimizer,
                                         named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    for epoch in range(1, args.epochs + 1):
        train(epoch)
        test()
    print("rank {}: parameter checksum {}".format(hvd.rank(), checksum(model)), flush=True)

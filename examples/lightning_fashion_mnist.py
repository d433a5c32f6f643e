#!/usr/bin/env python3
"""The Fashion-MNIST CNN of torch_fashion_mnist.py, trained with Lightning
(lightning.Trainer) on the torch.distributed backend "tutti" (torch 2.x).

    venv/bin/python examples/lightning_fashion_mnist.py --devices 2     # Lightning starts the ranks
    tuttirun -np 2 venv/bin/python examples/lightning_fashion_mnist.py  # tuttirun starts them
    ... --strategy fsdp2                                                # FSDP2 instead of DDP

Importing tutti.torch.distributed registers the backend; the strategy names
it with process_group_backend="tutti". Started as a plain `python` process,
Lightning's launcher re-runs this script for ranks 1..N-1 and every rank's
tutti joins through the store torch gives the backend (the torchrun path);
under tuttirun, the import joins tutti and sets the LOCAL_RANK, WORLD_SIZE
and MASTER_* variables from which Lightning sees that the ranks already exist.

--strategy ddp: DDPStrategy (DistributedDataParallel). --strategy fsdp2:
ModelParallelStrategy with fully_shard over the data-parallel mesh dimension
(FSDP2; Lightning's FSDPStrategy, FSDP1, accepts only CUDA accelerators).
Model, data and learning-rate scaling are torch_fashion_mnist.py's; the data
are the IDX files of the Debian package dataset-fashion-mnist (--data-dir).
Lightning's DistributedSampler shards the training set. Prints the mean
training loss of the first and last 10 steps and a parameter checksum per
rank, and the test accuracy over all ranks' shards of the test set.
"""

import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

import tutti.torch.distributed  # noqa: F401 (registers backend "tutti"; under tuttirun: joins)
from torch_fashion_mnist import REFERENCE_BATCH, Net, checksum, common_args, load_data


def parse_args():
    p = common_args(__doc__.split("\n\n")[0])
    p.add_argument("--strategy", choices=["ddp", "fsdp2"], default="ddp")
    p.add_argument("--backend", default="tutti", help="torch.distributed backend (tutti, gloo)")
    p.add_argument("--devices", type=int, default=int(os.environ.get("LOCAL_WORLD_SIZE", 2)),
                   help="ranks on this host (default: LOCAL_WORLD_SIZE under tuttirun, else 2)")
    p.add_argument("--test-batches", type=lambda v: float(v) if "." in v else int(v),
                   default=1.0, help="fraction (with a point: 0.5) or number (2) of the test "
                                     "batches of 500 per rank (default: 1.0, all)")
    return p.parse_args()


class FashionMNIST(L.LightningModule):
    def __init__(self, lr, fsdp2):
        super().__init__()
        self.net, self.lr, self.fsdp2 = Net(), lr, fsdp2
        self.losses, self.counts = [], torch.zeros(2, dtype=torch.float64)

    def configure_model(self):  # FSDP2: shard each layer, then the root, over the data mesh
        if self.fsdp2 and not hasattr(self.net, "reshard"):  # fit() and test() both call this
            from torch.distributed.fsdp import fully_shard
            mesh = self.device_mesh["data_parallel"]
            for layer in self.net.children():
                fully_shard(layer, mesh=mesh)
            fully_shard(self.net, mesh=mesh)

    def training_step(self, batch, _):
        loss = F.cross_entropy(self.net(batch[0]), batch[1])
        self.losses.append(loss.item())
        return loss

    def test_step(self, batch, _):
        self.counts += torch.tensor([(self.net(batch[0]).argmax(1) == batch[1]).sum().item(),
                                     batch[1].numel()], dtype=torch.float64)

    def on_test_epoch_end(self):
        self.counts = self.trainer.strategy.reduce(self.counts, reduce_op="sum")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def full_state(module):
    """The module's state with FSDP2's sharded parameters (DTensors) gathered whole."""
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v)
            for k, v in module.state_dict().items()}


def main():
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", args.devices))
    num_nodes = max(1, world // args.devices)
    if "TUTTI_CROSS_RANK" in os.environ:  # tuttirun: this host's index for Lightning's ranks
        os.environ.setdefault("NODE_RANK", os.environ["TUTTI_CROSS_RANK"])
    cores = os.cpu_count() or 1
    threads = int(os.environ.get("OMP_NUM_THREADS") or max(1, cores // args.devices))
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)  # the same initial parameters on every rank

    train_x, train_y, test_x, test_y = load_data(args.data_dir)
    n_train = int(train_x.shape[0] * args.train_fraction)
    lr = args.lr * args.batch_size * args.devices * num_nodes / REFERENCE_BATCH
    if args.strategy == "ddp":
        strategy = DDPStrategy(process_group_backend=args.backend)
    else:
        strategy = ModelParallelStrategy(data_parallel_size=args.devices * num_nodes,
                                         tensor_parallel_size=1, process_group_backend=args.backend)
    trainer = L.Trainer(accelerator="cpu", devices=args.devices, num_nodes=num_nodes,
                        strategy=strategy, max_epochs=args.epochs,
                        max_steps=args.max_steps or -1, limit_test_batches=args.test_batches,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    model = FashionMNIST(lr, args.strategy == "fsdp2")
    train = DataLoader(TensorDataset(train_x[:n_train], train_y[:n_train]),
                       batch_size=args.batch_size, shuffle=True, drop_last=True)
    trainer.fit(model, train)
    trainer.test(model, DataLoader(TensorDataset(test_x, test_y), batch_size=500), verbose=False)

    rank, size = trainer.global_rank, trainer.world_size
    digest, total = checksum(full_state(model.net))
    first, last = model.losses[:10], model.losses[-10:]
    print("rank %d of %d (backend %s, %s): train loss first 10 steps %.4f, last 10 steps %.4f, "
          "%d steps; parameter checksum %s (sum %.10e)"
          % (rank, size, torch.distributed.get_backend(), args.strategy, sum(first) / len(first),
             sum(last) / len(last), len(model.losses), digest, total), flush=True)
    if rank == 0:
        print("test accuracy %.2f%% (%d images over %d ranks)"
              % (100 * model.counts[0] / model.counts[1], model.counts[1], size), flush=True)
    trainer.strategy.barrier()
    # Started by Lightning's launcher: rank 0 waits for the ranks it started,
    # so that this process's exit status covers them all.
    codes = [p.wait() for p in getattr(trainer.strategy.launcher, "procs", [])]
    return max([0] + [abs(c) for c in codes])


if __name__ == "__main__":
    sys.exit(main())

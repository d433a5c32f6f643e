#!/usr/bin/python3
"""The Fashion-MNIST CNN of torch_fashion_mnist.py, trained with PyTorch's
DistributedDataParallel on the torch.distributed backend "tutti".

    tuttirun -np 4 /usr/bin/python3 examples/torch_ddp_fashion_mnist.py
    torchrun --redirects 1 --tee 1 --nproc_per_node 4 examples/torch_ddp_fashion_mnist.py

(Debian's torchrun needs --redirects 1 --tee 1 on Python 3.11.) The model,
data, sharding and learning-rate recipe are torch_fashion_mnist.py's; only
the distribution differs: DDP averages the gradient buckets over the
"tutti" process group instead of hvd.DistributedOptimizer. --backend gloo
runs the same on gloo; --hook tutti (or tutti-fp16) keeps the backend and
averages DDP's buckets with tutti.torch.distributed.allreduce_hook.
"""

import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import tutti.torch.distributed as tdist
from torch_fashion_mnist import REFERENCE_BATCH, Net, checksum, common_args, load_data


def parse_args():
    p = common_args(__doc__.split("\n\n")[0])
    p.add_argument("--log-interval", type=int, default=50, help="steps between progress lines")
    p.add_argument("--backend", default="tutti", help="torch.distributed backend (tutti, gloo)")
    p.add_argument("--hook", choices=["none", "tutti", "tutti-fp16"], default="none",
                   help="DDP comm hook: none (the backend's allreduce) or tutti's allreduce_hook")
    return p.parse_args()


def evaluate(model, images, labels):
    """Accuracy over the ranks' shards of the test set."""
    rank, size = dist.get_rank(), dist.get_world_size()
    model.eval()
    shard = torch.arange(rank, images.shape[0], size)
    correct = 0
    with torch.no_grad():
        for i in range(0, shard.numel(), 1000):
            idx = shard[i:i + 1000]
            correct += (model(images[idx]).argmax(1) == labels[idx]).sum().item()
    totals = torch.tensor([correct, shard.numel()], dtype=torch.float64)
    dist.all_reduce(totals)
    model.train()
    return totals[0].item() / totals[1].item()


def main():
    args = parse_args()
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    threads = int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // local))
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)  # DDP also broadcasts rank 0's parameters

    train_x, train_y, test_x, test_y = load_data(args.data_dir)
    n_train = int(train_x.shape[0] * args.train_fraction)
    global_batch = args.batch_size * size
    steps_per_epoch = n_train // global_batch
    lr = args.lr * global_batch / REFERENCE_BATCH
    model = DDP(Net())
    if args.hook != "none":
        compression = "fp16" if args.hook == "tutti-fp16" else "none"
        model.register_comm_hook(tdist.TuttiHookState(compression=compression),
                                 tdist.allreduce_hook)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    if rank == 0:
        print("DDP on backend %s (hook %s): %d ranks, %d thread(s) each; global batch %d, "
              "lr %.4g, %d steps/epoch" % (dist.get_backend(), args.hook, size, threads,
                                           global_batch, lr, steps_per_epoch), flush=True)

    total_steps = args.epochs * steps_per_epoch
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)
    step, start, accuracy = 0, time.time(), 0.0
    for epoch in range(1, args.epochs + 1):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)  # same on every rank
        shard = torch.randperm(train_x.shape[0], generator=g)[:steps_per_epoch * global_batch]
        shard = shard[rank::size]
        epoch_start = interval_start = time.time()
        loss_sum, interval_loss, epoch_steps = 0.0, 0.0, 0
        for i in range(steps_per_epoch):
            if step >= total_steps:
                break
            idx = shard[i * args.batch_size:(i + 1) * args.batch_size]
            for group in optimizer.param_groups:
                group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            step += 1
            epoch_steps += 1
            loss_sum += loss.item()
            interval_loss += loss.item()
            if rank == 0 and (i + 1) % args.log_interval == 0:
                now = time.time()
                print("epoch %d step %d/%d loss %.4f %.0f images/s"
                      % (epoch, i + 1, steps_per_epoch, interval_loss / args.log_interval,
                         args.log_interval * global_batch / (now - interval_start)), flush=True)
                interval_start, interval_loss = now, 0.0
        elapsed = time.time() - epoch_start
        mean_loss = torch.tensor([loss_sum / max(epoch_steps, 1) / size])
        dist.all_reduce(mean_loss)  # SUM of the shares: gloo has no AVG
        accuracy = evaluate(model, test_x, test_y)
        if rank == 0:
            print("epoch %d: train loss %.4f, test accuracy %.2f%%, %.0f images/s (%.1f s)"
                  % (epoch, mean_loss.item(), 100 * accuracy,
                     epoch_steps * global_batch / elapsed, elapsed), flush=True)
        if step >= total_steps:
            break

    digest, total = checksum(model.module)
    dist.barrier()
    print("rank %d: parameter checksum %s (sum %.10e)" % (rank, digest, total), flush=True)
    dist.barrier()
    if rank == 0:
        print("done: %d steps in %.1f s, final test accuracy %.2f%%"
              % (step, time.time() - start, 100 * accuracy), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

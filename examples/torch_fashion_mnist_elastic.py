#!/usr/bin/python3
"""Elastic data-parallel training of the Fashion-MNIST CNN with tutti (docs/elastic.md).

    tuttirun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./discover_hosts.sh \\
        /usr/bin/python3 examples/torch_fashion_mnist_elastic.py --epochs 2

The model, the data and the evaluation are examples/torch_fashion_mnist.py's.
The training state (model, optimizer, an ElasticSampler, epoch, batch and
step counters) is a TorchState committed every --commit-every steps and at
the end of each epoch; @hvd.elastic.run restores the last commit when a peer
is lost and carries on with the survivors (and with newcomers when hosts are
added) at the new size. The learning rate is --lr scaled linearly with the
global batch (per-rank batch x size), re-scaled at every reset.

Runs as a plain job too (tuttirun -np 2 ...: no elastic driver, no resets).

Output, one line each (workers' lines are prefixed by tuttirun):
    commit: generation G rank R size N epoch E batch B step S
    reset: generation G rank R size N
    step-time: generation G rank R size N step S time T      (--log-times)
    rank R: parameter checksum D (sum X)                      (at the end)
    done: S steps in T s, final test accuracy A%              (rank 0)
"step" counts optimizer steps over the whole run; after a restore it goes
back to the last commit, never further.
"""

import argparse
import sys
import time

import torch
import torch.nn.functional as F

import tutti
import tutti.elastic
import tutti.torch as hvd
# The model, data and evaluation of the non-elastic example (this directory).
from torch_fashion_mnist import (REFERENCE_BATCH, Net, checksum, common_args, evaluate, load_data,
                                 set_threads)


def parse_args():
    p = common_args(__doc__.split("\n\n")[0])
    p.add_argument("--commit-every", type=int, default=10,
                   help="optimizer steps between commits (default: 10)")
    p.add_argument("--train-samples", type=int, default=0,
                   help="use the first N training images (overrides --train-fraction; 0: off)")
    p.add_argument("--log-times", action="store_true",
                   help="print time.time() after every completed step (recovery benchmarks)")
    args = p.parse_args()
    if args.commit_every < 1:
        p.error("--commit-every must be >= 1")
    return args


def where():
    return "generation %d rank %d size %d" % (tutti.elastic.generation(), hvd.rank(), hvd.size())


def commit(state):
    """Commits and says so (only once the commit is complete on every rank)."""
    state.commit()
    print("commit: %s epoch %d batch %d step %d" % (where(), state.epoch, state.batch, state.step),
          flush=True)


@hvd.elastic.run
def train(state, args, train_x, train_y, test_x, test_y):
    """Trains from the state's epoch/batch to the end (or --max-steps); returns
    the test accuracy. Runs again from the last commit after a reset."""
    model, optimizer, sampler = state.model, state.optimizer, state.sampler
    while state.epoch < args.epochs:
        # This rank's share of what the job has not processed in this epoch
        # (the same number of batches on every rank).
        batches = (len(sampler) + args.batch_size - 1) // args.batch_size
        for b in range(batches):
            if args.max_steps and state.step >= args.max_steps:
                break
            idx = torch.tensor(sampler.get_indices(b, args.batch_size), dtype=torch.int64)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            sampler.record_batch(b, args.batch_size)
            state.batch += 1
            state.step += 1
            if args.log_times:
                print("step-time: %s step %d time %.6f" % (where(), state.step, time.time()),
                      flush=True)
            if state.step % args.commit_every == 0:
                commit(state)
        else:
            state.epoch += 1
            state.batch = 0
            sampler.set_epoch(state.epoch)
            commit(state)
            continue
        break  # --max-steps
    accuracy = evaluate(model, test_x, test_y)
    digest, total = checksum(model)
    hvd.barrier()
    print("rank %d: parameter checksum %s (sum %.10e)" % (hvd.rank(), digest, total), flush=True)
    hvd.barrier()
    return accuracy


def main():
    args = parse_args()
    hvd.init()
    threads = set_threads()
    torch.manual_seed(args.seed + hvd.rank())  # different on purpose: the first sync fixes it

    train_x, train_y, test_x, test_y = load_data(args.data_dir)
    n_train = args.train_samples or int(train_x.shape[0] * args.train_fraction)
    train_x, train_y = train_x[:n_train], train_y[:n_train]

    lr_per_rank = args.lr * args.batch_size / REFERENCE_BATCH
    model = Net()
    optimizer = hvd.DistributedOptimizer(
        torch.optim.Adam(model.parameters(), lr=lr_per_rank * hvd.size()),
        named_parameters=model.named_parameters(), compression=args.compression)
    sampler = hvd.elastic.ElasticSampler(train_y, shuffle=True, seed=args.seed)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0, step=0)

    def on_reset():
        for group in optimizer.param_groups:
            group["lr"] = lr_per_rank * hvd.size()
        print("reset: %s" % where(), flush=True)

    state.register_reset_callbacks([on_reset])
    if hvd.rank() == 0:
        print("tutti %s: %d ranks, %d thread(s) each; %d training images, per-rank batch %d, "
              "commit every %d steps, elastic %s"
              % (tutti.library_version(), hvd.size(), threads, n_train, args.batch_size,
                 args.commit_every, "on" if tutti.elastic.enabled() else "off"), flush=True)
    start = time.time()
    accuracy = train(state, args, train_x, train_y, test_x, test_y)
    if hvd.rank() == 0:
        print("done: %d steps in %.1f s, final test accuracy %.2f%%"
              % (state.step, time.time() - start, 100 * accuracy), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())

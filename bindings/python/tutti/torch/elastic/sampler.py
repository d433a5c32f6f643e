"""ElasticSampler: shards a dataset over the ranks and re-shards the part of
the epoch not yet processed when the ranks change (Horovod's ElasticSampler).
"""

import math
import random

import torch.utils.data

from tutti.basics import rank, size
from tutti.errors import NotInitializedError


def shard_remaining(num_items, processed, epoch, seed, shuffle, shard_rank, num_shards):
    """The indices shard_rank of num_shards ranks still has to process this epoch.

    Pure: num_items dataset indices 0..num_items-1, minus the set `processed`,
    in a permutation that depends only on seed + epoch (when shuffle), padded
    by repeating its head to a multiple of num_shards (every rank gets the
    same count, so ranks run the same number of steps), then dealt round-robin
    (rank r takes positions r, r + num_shards, ...). Returns a list of
    ceil(remaining / num_shards) ints; [] when nothing remains. Over the ranks
    every remaining index is dealt once, plus the padding: fewer than
    num_shards extra entries, which repeat the head of the order.
    """
    if num_shards < 1 or not 0 <= shard_rank < num_shards:
        raise ValueError("shard_remaining: rank %d of %d shards" % (shard_rank, num_shards))
    remaining = [i for i in range(num_items) if i not in processed]
    if shuffle:
        random.Random(seed + epoch).shuffle(remaining)
    per_rank = int(math.ceil(len(remaining) / num_shards))
    total = per_rank * num_shards
    while len(remaining) < total:  # pad (more than once when remaining < num_shards)
        remaining += remaining[:total - len(remaining)]
    return remaining[shard_rank:total:num_shards]


class ElasticSampler(torch.utils.data.Sampler):
    """A torch Sampler of dataset indices for this rank that tracks what was processed.

    dataset: anything with a constant len(). shuffle: a fresh permutation per
    epoch (seed + epoch; seed must be equal on every rank). Use it with a
    TorchState (a keyword argument of it, e.g. ``TorchState(model, opt,
    sampler=sampler)``): call record_batch() after each batch (or
    record_indices()), commit() the state from time to time, and
    set_epoch(epoch + 1) at the **end** of each epoch (it forgets the
    processed indices). At a commit the processed indices of every rank are
    gathered; after a reset the indices of the epoch not committed as
    processed are dealt over the new ranks (reset()).

    Attributes: epoch, processed_indices (set of ints), indices (this rank's
    list for the current pass), num_samples (= len(indices) = len(self)),
    rank, num_replicas (the placement the indices were dealt for).
    Thread-safety: none (one training loop).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.rank = 0
        self.num_replicas = 1
        self.indices = []
        self.num_samples = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: forgets the processed indices and deals anew."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def get_indices(self, batch_idx, batch_size):
        """This rank's indices of batch batch_idx (0-based since the last reset)."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def record_batch(self, batch_idx, batch_size):
        """Marks this rank's batch batch_idx (of batch_size) as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Marks dataset indices (an iterable of ints) as processed."""
        self.processed_indices.update(int(i) for i in indices)

    def state_dict(self):
        """{"epoch": int, "processed_indices": set} (picklable)."""
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        """Takes epoch and processed indices from state_dict and deals anew (reset())."""
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self):
        """Deals the indices not yet processed this epoch over the current
        ranks (tutti's rank() and size(); rank 0 of 1 when not initialised)."""
        try:
            self.rank, self.num_replicas = rank(), size()
        except NotInitializedError:  # a sampler built before init()
            self.rank, self.num_replicas = 0, 1
        self.indices = shard_remaining(len(self.dataset), self.processed_indices, self.epoch,
                                       self.seed, self.shuffle, self.rank, self.num_replicas)
        self.num_samples = len(self.indices)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples

"""ElasticSampler: dealing and re-dealing the rest of an epoch (pure Python:
no collectives, so it runs alike under any job size or without tuttirun)."""

import pytest

from tutti.torch.elastic import sampler as sampler_module
from tutti.torch.elastic.sampler import ElasticSampler, shard_remaining


@pytest.mark.parametrize("num_items,size", [(0, 3), (1, 3), (2, 3), (10, 3), (11, 4), (97, 7),
                                            (100, 1), (100, 13)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_cover_every_index_once_but_padding(num_items, size, shuffle):
    shards = [shard_remaining(num_items, set(), 5, 1, shuffle, r, size) for r in range(size)]
    per_rank = -(-num_items // size)
    assert [len(s) for s in shards] == [per_rank] * size
    dealt = [i for s in shards for i in s]
    assert set(dealt) == set(range(num_items))
    # Padding: fewer than `size` extra entries, repeating the head of the order.
    order = shard_remaining(num_items, set(), 5, 1, shuffle, 0, 1)
    extra = sorted(i for i in set(dealt) for _ in range(dealt.count(i) - 1))
    assert len(extra) < size
    assert extra == sorted((order * size)[:len(extra)])


def test_shuffle_depends_on_seed_and_epoch_only():
    a = shard_remaining(50, set(), 1, 7, True, 0, 1)
    assert a == shard_remaining(50, set(), 1, 7, True, 0, 1)
    assert a != shard_remaining(50, set(), 2, 7, True, 0, 1)
    assert a != shard_remaining(50, set(), 1, 8, True, 0, 1)
    assert shard_remaining(50, set(), 1, 7, False, 0, 1) == list(range(50))


def test_bad_rank_raises():
    with pytest.raises(ValueError):
        shard_remaining(10, set(), 0, 0, False, 3, 3)


class Placement:
    """Stands in for tutti's rank()/size() inside the sampler module."""

    def __init__(self, monkeypatch):
        self.rank, self.size = 0, 1
        monkeypatch.setattr(sampler_module, "rank", lambda: self.rank)
        monkeypatch.setattr(sampler_module, "size", lambda: self.size)


def samplers_at(placement, size, states, dataset, shuffle):
    """One sampler per rank of a job of `size`, loaded with `states` (state_dicts)."""
    out = []
    for r in range(size):
        placement.rank, placement.size = r, size
        s = ElasticSampler(dataset, shuffle=shuffle, seed=3)
        if states is not None:
            s.load_state_dict(states)
        out.append(s)
    return out


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("num_items,batch,batches_before", [(103, 4, 5), (60, 5, 4), (7, 2, 1)])
def test_reset_from_3_to_2_loses_and_duplicates_nothing(monkeypatch, shuffle, num_items, batch,
                                                         batches_before):
    placement = Placement(monkeypatch)
    dataset = list(range(num_items))
    job3 = samplers_at(placement, 3, None, dataset, shuffle)
    assert len({len(s) for s in job3}) == 1
    done = []
    for b in range(batches_before):
        for s in job3:
            done += s.get_indices(b, batch)
            s.record_batch(b, batch)
    # What a commit's gather does: the union of the ranks' processed indices.
    committed = {"epoch": 0, "processed_indices": set().union(*(s.processed_indices for s in job3))}
    assert committed["processed_indices"] == set(done)
    job2 = samplers_at(placement, 2, committed, dataset, shuffle)
    assert [(s.rank, s.num_replicas) for s in job2] == [(0, 2), (1, 2)]
    assert len(job2[0]) == len(job2[1]) == -(-(num_items - len(set(done))) // 2)
    rest = [i for s in job2 for i in s]
    assert set(rest) | set(done) == set(range(num_items))  # nothing lost
    assert not set(rest) & set(done)  # nothing processed twice
    assert len(rest) - len(set(rest)) <= 1  # only padding to an even count repeats


def test_set_epoch_forgets_processed_and_state_dict_round_trips(monkeypatch):
    placement = Placement(monkeypatch)
    placement.rank, placement.size = 1, 2
    s = ElasticSampler(range(20), shuffle=True, seed=0)
    s.record_batch(0, 3)
    assert len(s.processed_indices) == 3 and len(s) == 10
    state = s.state_dict()
    s.record_indices([s.indices[5]])
    state["processed_indices"].add(-1)  # state_dict() returns a copy
    assert -1 not in s.processed_indices
    s.load_state_dict(state)
    assert len(s.processed_indices) == 4 and len(s) == 9  # 17 left over 2 ranks
    s.set_epoch(1)
    assert s.epoch == 1 and s.processed_indices == set() and len(s) == 10
    assert list(iter(s)) == s.indices

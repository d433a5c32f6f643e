"""One rank of a cross-host job (tests/cluster/cluster_tests.py): reports where it
runs and checks every collective against references computed here without tutti.

    cluster_worker.py collectives    placement facts, then the collectives of the
                                     global set and of two process sets
    cluster_worker.py torch_dist     dist.all_reduce/all_gather/broadcast through
                                     init_process_group("tutti")
    cluster_worker.py loop           checked allreduces until an error: prints
                                     `STEP` every 10, then `LOST <rank> <time> <error>`
                                     and exits 3

Prints `FACTS {json}` (rank, placement, network namespace, shared-memory
segments mapped) and `RANK <r> OK`; an assertion names what was wrong.
Inputs of rank r are integers (exact in every dtype used), so references
are exact: rank r's tensor is `value(r, n) = (arange(n) % 97) * (r + 1) + r`.
"""
import json
import os
import sys

import torch


def value(r, n, dtype=torch.float32):
    return ((torch.arange(n, dtype=torch.int64) % 97) * (r + 1) + r).to(dtype)


def shm_segments():
    """Shared-memory rings this process has mapped (tutti's peers on its host)."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "/dev/shm/" in line)


def expect_equal(what, got, want):
    assert torch.equal(got, want), "%s: got %s, expected %s" % (what, got.flatten()[:8],
                                                               want.flatten()[:8])


def check_allreduce(hvd, ranks, ps, tag):
    me = hvd.rank()
    for n in (1, 1000, 300000):  # 300000 floats = 1.2 MB: a pipelined ring with chunks
        for dtype in (torch.float32, torch.int32, torch.float64):
            got = hvd.allreduce(value(me, n, dtype), op=hvd.Sum, name="ar.%s.%d.%s" %
                                (tag, n, dtype), process_set=ps)
            want = sum(value(r, n, torch.int64) for r in ranks).to(dtype)
            expect_equal("%s allreduce sum n=%d %s" % (tag, n, dtype), got, want)
    got = hvd.allreduce(value(me, 5000, torch.float64), op=hvd.Average, name="avg." + tag,
                        process_set=ps)
    want = sum(value(r, 5000, torch.float64) for r in ranks) / len(ranks)
    expect_equal(tag + " allreduce average", got, want)
    for op, fold in ((hvd.Min, torch.minimum), (hvd.Max, torch.maximum)):
        got = hvd.allreduce(value(me, 777, torch.int32), op=op, name="mm.%s.%s" % (tag, op),
                            process_set=ps)
        want = value(ranks[0], 777, torch.int32)
        for r in ranks[1:]:
            want = fold(want, value(r, 777, torch.int32))
        expect_equal("%s allreduce %s" % (tag, op), got, want)


def check_others(hvd, ranks, ps, tag):
    me, size = hvd.rank(), len(ranks)
    pos = ranks.index(me)
    rows = lambda r: value(r, 3 * (r + 1)).reshape(r + 1, 3)  # noqa: E731
    got = hvd.allgather(rows(me), name="ag." + tag, process_set=ps)
    expect_equal(tag + " allgather", got, torch.cat([rows(r) for r in ranks]))
    for root in (ranks[0], ranks[-1]):
        got = hvd.broadcast(value(me, 100000), root_rank=root, name="bc.%s.%d" % (tag, root),
                            process_set=ps)
        expect_equal("%s broadcast from %d" % (tag, root), got, value(root, 100000))
    # alltoall: rank at position p sends (q + 1) rows of 2 to position q.
    send = lambda r: value(r, 2 * sum(q + 1 for q in range(size))).reshape(-1, 2)  # noqa: E731
    splits = torch.tensor([q + 1 for q in range(size)], dtype=torch.int32)
    got = hvd.alltoall(send(me), splits=splits, name="a2a." + tag, process_set=ps)
    got = got[0] if isinstance(got, tuple) else got
    offset = sum(q + 1 for q in range(pos))
    want = torch.cat([send(r)[offset:offset + pos + 1] for r in ranks])
    expect_equal(tag + " alltoall", got, want)
    n = 4 * size * 1000
    got = hvd.reducescatter(value(me, n), op=hvd.Sum, name="rs." + tag, process_set=ps)
    full = sum(value(r, n, torch.int64) for r in ranks).to(torch.float32)
    expect_equal(tag + " reducescatter", got, full[pos * n // size:(pos + 1) * n // size])


def collectives():
    import tutti.torch as hvd

    hvd.init()
    me, size = hvd.rank(), hvd.size()
    world = list(range(size))
    check_allreduce(hvd, world, None, "world")
    facts = {"rank": me, "size": size, "local_rank": hvd.local_rank(),
             "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
             "cross_size": hvd.cross_size(), "netns": os.readlink("/proc/self/ns/net"),
             "shm_segments": shm_segments()}
    print("FACTS " + json.dumps(facts), flush=True)
    check_others(hvd, world, None, "world")
    # Two process sets across hosts: the first and last rank, and all but rank 0.
    sets = [sorted({0, size - 1}), world[1:]]
    handles = [hvd.add_process_set(s) for s in sets]
    for s, ps in zip(sets, handles):
        if me in s:
            check_allreduce(hvd, s, ps, "set%s" % s)
            check_others(hvd, s, ps, "set%s" % s)
    hvd.barrier()
    print("RANK %d OK" % me, flush=True)
    hvd.shutdown()


def torch_dist():
    import torch.distributed as dist
    import tutti.torch.distributed  # noqa: F401 (registers "tutti", joins the job)

    dist.init_process_group("tutti")
    me, size = dist.get_rank(), dist.get_world_size()
    t = value(me, 200000)
    dist.all_reduce(t)
    expect_equal("dist.all_reduce", t, sum(value(r, 200000, torch.int64) for r in range(size))
                 .to(torch.float32))
    parts = [torch.empty(10) for _ in range(size)]
    dist.all_gather(parts, value(me, 10))
    for r in range(size):
        expect_equal("dist.all_gather part %d" % r, parts[r], value(r, 10))
    t = value(me, 1000)
    dist.broadcast(t, src=size - 1)
    expect_equal("dist.broadcast", t, value(size - 1, 1000))
    dist.barrier()
    print("RANK %d OK" % me, flush=True)
    dist.destroy_process_group()


def loop():
    import time

    import tutti
    import tutti.torch as hvd

    hvd.init()
    me, size = hvd.rank(), hvd.size()
    want = sum(value(r, 100000, torch.int64) for r in range(size)).to(torch.float32)
    step = 0
    try:
        while True:
            expect_equal("loop allreduce", hvd.allreduce(value(me, 100000), op=hvd.Sum,
                                                         name="loop"), want)
            step += 1
            if step % 10 == 0:
                print("STEP %d rank %d" % (step, me), flush=True)
    except tutti.TuttiError as e:
        print("LOST %d %.3f %s: %s" % (me, time.time(), type(e).__name__, e), flush=True)
        sys.exit(3)


if __name__ == "__main__":
    torch.set_num_threads(1)
    {"collectives": collectives, "torch_dist": torch_dist, "loop": loop}[sys.argv[1]]()

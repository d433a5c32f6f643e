"""Process sets in tutti.torch (Horovod 0.28.1's process-set tests of
test_torch.py, ported, and more): every collective over the even and the odd
ranks at once, with rank-dependent values checked against references
computed here without tutti; overlapping sets, sets of one rank, one name in
flight in several sets; errors (an op on a foreign or unregistered set,
registration mistakes raise on every rank instead of hanging).

Every rank runs every test (sets are registered collectively); a test that
needs two ranks skips on every rank at size 1 (then [0] is the global set).
"""

import itertools

import pytest
import torch

import tutti
import tutti.elastic
import tutti.process_sets
import tutti.torch as hvd

DTYPES = [torch.int32, torch.int64, torch.float16, torch.float32, torch.float64]


def values(r, shape, dtype, seed=0):
    """Rank r's test tensor: integers in [-100, 100) (exact in every dtype
    once summed over a few ranks), different per rank."""
    g = torch.Generator().manual_seed(1234 + seed * 100 + r)
    return torch.randint(-100, 100, shape, generator=g).to(dtype)


def exact(dtype):
    return dict(rtol=0, atol=0) if not dtype.is_floating_point else dict(rtol=1e-3, atol=1e-3)


@pytest.fixture
def even_odd():
    """(even set, odd set, this rank's set) registered for the test, removed after."""
    if hvd.size() < 2:
        pytest.skip("process sets other than the global one need 2 ranks")
    even = hvd.add_process_set(range(0, hvd.size(), 2))
    odd = hvd.add_process_set(range(1, hvd.size(), 2))
    yield even, odd, even if even.included() else odd
    assert hvd.remove_process_set(odd) and hvd.remove_process_set(even)


def test_process_set_objects():
    ps = hvd.ProcessSet([2, 0, 1])
    assert ps.ranks == [0, 1, 2] and ps.process_set_id is None
    assert ps.size() is None and ps.rank() is None  # not registered
    assert ps.included() == (hvd.rank() <= 2)
    assert str(ps) == "ProcessSet(process_set_id=None, ranks=[0, 1, 2], mpi_comm=None)"
    with pytest.raises(ValueError):
        hvd.ProcessSet([0, "1"])
    with pytest.raises(ValueError, match="MPI communicator"):
        hvd.ProcessSet(object())  # e.g. an mpi4py communicator
    g = hvd.global_process_set
    assert g.process_set_id == 0 and g.ranks == list(range(hvd.size()))
    assert g.size() == hvd.size() and g.rank() == hvd.rank() and g.included()
    assert str(g) == "ProcessSet(process_set_id=0, ranks=%s, mpi_comm=None)" % list(
        range(hvd.size()))
    assert tutti.global_process_set is g and tutti.process_set_by_id(0) is g
    assert hvd.remove_process_set(g) is False
    assert hvd.remove_process_set(hvd.ProcessSet([0])) is False  # never registered
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(2), process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match="ProcessSet"):
        hvd.allreduce(torch.ones(2), process_set=0)


def test_registration_queries_and_removal(even_odd):
    even, odd, mine = even_odd
    r = hvd.rank()
    assert 0 < even.process_set_id < odd.process_set_id
    assert even.ranks == list(range(0, hvd.size(), 2)) and odd.ranks == list(range(1, hvd.size(), 2))
    assert mine.size() == len(mine.ranks) and mine.rank() == mine.ranks.index(r)
    other = odd if mine is even else even
    assert other.size() == len(other.ranks) and not other.included()
    with pytest.raises(ValueError, match="not part of"):
        other.rank()
    listed = tutti.process_sets.process_sets()
    assert listed[0] is hvd.global_process_set and even in listed and odd in listed
    assert tutti.process_set_by_id(odd.process_set_id) is odd
    # Every rank registered the same ids (the ids are the job's, not the rank's).
    ids = hvd.allgather(torch.tensor([even.process_set_id, odd.process_set_id]))
    assert ids.view(-1, 2).eq(ids[:2]).all()
    # Removal invalidates; ids are not reused; re-adding the same object works.
    old = odd.process_set_id
    assert hvd.remove_process_set(odd) is True and odd.process_set_id is None
    assert hvd.remove_process_set(odd) is False
    with pytest.raises(ValueError):
        tutti.process_set_by_id(old)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=odd)
    assert hvd.add_process_set(odd) is odd and odd.process_set_id > old
    assert tutti.process_set_by_id(odd.process_set_id) is odd


def test_registration_mistakes_raise_on_every_rank(even_odd):
    even, odd, _ = even_odd
    n, r = hvd.size(), hvd.rank()
    with pytest.raises(ValueError, match="exists already"):
        hvd.add_process_set(list(reversed(odd.ranks)))  # same ranks as odd
    with pytest.raises(ValueError, match="exists already"):
        hvd.add_process_set(range(n))  # the global set
    with pytest.raises(ValueError, match="out of range"):
        hvd.add_process_set([0, n])
    with pytest.raises(ValueError, match="twice"):
        hvd.add_process_set([0, 0])
    with pytest.raises(ValueError):
        hvd.add_process_set([])
    with pytest.raises(hvd.HorovodInternalError, match="differ"):
        hvd.add_process_set([0] if r == 0 else [0, 1])  # ranks disagree: an error, not a hang
    with pytest.raises(ValueError, match="registered already"):
        hvd.add_process_set(even)
    # Nothing was registered by the mistakes; the sets still work.
    assert len(tutti.process_sets.process_sets()) == 3
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n


def test_ops_on_a_foreign_set_raise_at_once(even_odd):
    even, odd, mine = even_odd
    other = odd if mine is even else even
    t = torch.ones(4)
    for call in (lambda: hvd.allreduce(t, process_set=other),
                 lambda: hvd.allreduce_async_(t, process_set=other),
                 lambda: hvd.grouped_allreduce([t], process_set=other),
                 lambda: hvd.allgather(t, process_set=other),
                 lambda: hvd.grouped_allgather([t], process_set=other),
                 lambda: hvd.broadcast(t, other.ranks[0], process_set=other),
                 lambda: hvd.alltoall(t, process_set=other),
                 lambda: hvd.reducescatter(t, process_set=other),
                 lambda: hvd.grouped_reducescatter([t], process_set=other),
                 lambda: hvd.sparse_allreduce_async(t.to_sparse(), "s", hvd.Sum, other),
                 lambda: hvd.barrier(process_set=other),
                 lambda: hvd.broadcast_object(1, other.ranks[0], process_set=other)):
        with pytest.raises(ValueError, match="not in process set"):
            call()
    # A root outside the set, and an op that differs within the set.
    with pytest.raises(ValueError, match="root rank"):
        hvd.broadcast(t, other.ranks[0], process_set=mine)
    if mine.size() > 1:
        with pytest.raises(hvd.HorovodInternalError, match="shapes differ"):
            hvd.allreduce(torch.ones(2 + mine.rank()), process_set=mine)
        dtype = torch.float64 if mine.rank() == 0 else torch.float32
        with pytest.raises(hvd.HorovodInternalError, match="dtypes differ"):
            hvd.allreduce(torch.ones(3, dtype=dtype), process_set=mine)
    hvd.barrier()


def test_removing_a_set_fails_its_pending_ops():
    if hvd.size() < 3:
        pytest.skip("needs a set of two ranks other than the global set")
    pair = hvd.add_process_set([0, 1])
    # Only rank 0 submits: the op cannot complete, and the removal ends it.
    pending = hvd.allreduce_async(torch.ones(3), name="only.rank0",
                                  process_set=pair) if hvd.rank() == 0 else None
    assert hvd.remove_process_set(pair)
    if pending is not None:
        with pytest.raises(ValueError, match="was pending when process set"):
            hvd.synchronize(pending)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_even_odd(even_odd, dtype):
    even, odd, mine = even_odd
    r = hvd.rank()
    for dim in (1, 2, 3):
        shape = [5] * dim
        t = values(r, shape, dtype, dim)
        want = sum(values(q, shape, torch.float64, dim) for q in mine.ranks)
        got = hvd.allreduce(t, op=hvd.Sum, process_set=mine, name="ar.%d" % dim)
        torch.testing.assert_close(got.double(), want, **exact(dtype))
        inplace = t.clone()
        hvd.allreduce_(inplace, op=hvd.Sum, process_set=mine)
        torch.testing.assert_close(inplace.double(), want, **exact(dtype))
        if dtype.is_floating_point:
            avg = hvd.allreduce(t, process_set=mine)  # Average over the set's size
            torch.testing.assert_close(avg.double(), want / mine.size(), rtol=1e-3, atol=1e-2)
        h = hvd.allreduce_async(t, op=hvd.Max, process_set=mine)
        top = torch.stack([values(q, shape, torch.float64, dim) for q in mine.ranks]).amax(0)
        torch.testing.assert_close(hvd.synchronize(h).double(), top, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_allreduce_even_odd(even_odd, dtype):
    even, odd, mine = even_odd
    r = hvd.rank()
    ts = [values(r, [3 + i, 4], dtype, i) for i in range(4)]
    want = [sum(values(q, [3 + i, 4], torch.float64, i) for q in mine.ranks) for i in range(4)]
    for got, w in zip(hvd.grouped_allreduce(ts, op=hvd.Sum, process_set=mine), want):
        torch.testing.assert_close(got.double(), w, **exact(dtype))
    copies = [t.clone() for t in ts]
    hvd.grouped_allreduce_(copies, op=hvd.Sum, process_set=mine)
    for got, w in zip(copies, want):
        torch.testing.assert_close(got.double(), w, **exact(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_even_odd(even_odd, dtype):
    even, odd, mine = even_odd
    r = hvd.rank()
    rows = lambda q: q % 3 + 1  # noqa: E731 (first dimensions differ per rank)
    got = hvd.allgather(values(r, [rows(r), 4, 2], dtype), process_set=mine)
    want = torch.cat([values(q, [rows(q), 4, 2], dtype) for q in mine.ranks])
    assert torch.equal(got, want)
    grouped = hvd.grouped_allgather([values(r, [rows(r), 3], dtype, 1),
                                     values(r, [1, 2], dtype, 2)], process_set=mine)
    assert torch.equal(grouped[0], torch.cat([values(q, [rows(q), 3], dtype, 1)
                                              for q in mine.ranks]))
    assert torch.equal(grouped[1], torch.cat([values(q, [1, 2], dtype, 2) for q in mine.ranks]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_from_every_member_even_odd(even_odd, dtype):
    even, odd, mine = even_odd
    r = hvd.rank()
    for root in mine.ranks:  # global ranks, as Horovod's `root_rank in set_ranks`
        got = hvd.broadcast(values(r, [3, 5], dtype), root, process_set=mine)
        assert torch.equal(got, values(root, [3, 5], dtype))
        t = values(r, [2, 2], dtype, 1)
        hvd.broadcast_(t, root, process_set=mine)
        assert torch.equal(t, values(root, [2, 2], dtype, 1))


def test_alltoall_even_odd(even_odd):
    even, odd, mine = even_odd
    r, n, i = hvd.rank(), mine.size(), mine.rank()
    # Member i sends j + 1 rows of value 100 * r + j to member j.
    splits = [j + 1 for j in range(n)]
    t = torch.cat([torch.full((j + 1, 2), 100.0 * r + j) for j in range(n)])
    out, received = hvd.alltoall(t, splits=splits, process_set=mine)
    want = torch.cat([torch.full((i + 1, 2), 100.0 * q + i) for q in mine.ranks])
    assert torch.equal(out, want)
    assert received.tolist() == [i + 1] * n
    even_split = hvd.alltoall(torch.arange(2.0 * n) + 1000 * r, process_set=mine)
    assert even_split.tolist() == [1000.0 * q + 2 * i + k for q in mine.ranks for k in range(2)]


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.float64])
def test_reducescatter_even_odd(even_odd, dtype):
    even, odd, mine = even_odd
    r, n, i = hvd.rank(), mine.size(), mine.rank()
    rows = 2 * n + 1  # uneven: the first members get one more row
    total = sum(values(q, [rows, 3], torch.float64) for q in mine.ranks)
    counts = [rows // n + (1 if j < rows % n else 0) for j in range(n)]
    lo = sum(counts[:i])
    got = hvd.reducescatter(values(r, [rows, 3], dtype), op=hvd.Sum, process_set=mine)
    torch.testing.assert_close(got.double(), total[lo:lo + counts[i]], **exact(dtype))
    both = hvd.grouped_reducescatter([values(r, [rows, 3], dtype), values(r, [n, 1], dtype, 1)],
                                     op=hvd.Sum, process_set=mine)
    torch.testing.assert_close(both[0].double(), total[lo:lo + counts[i]], **exact(dtype))
    second = sum(values(q, [n, 1], torch.float64, 1) for q in mine.ranks)
    torch.testing.assert_close(both[1].double(), second[i:i + 1], **exact(dtype))


def test_gradients_reduce_over_the_same_set(even_odd):
    even, odd, mine = even_odd
    r, n, i = hvd.rank(), mine.size(), mine.rank()
    x = torch.full((3,), float(r + 1), dtype=torch.float64, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum, process_set=mine).backward(torch.ones(3, dtype=torch.float64))
    assert x.grad.tolist() == [float(n)] * 3  # the same Sum over the set
    x = torch.ones(r + 1, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x, process_set=mine)
    y.backward(torch.arange(float(y.numel()), dtype=torch.float64).view_as(y))
    lo = sum(q + 1 for q in mine.ranks[:i])  # this member's rows, by its rank in the set
    want = torch.arange(float(y.numel()), dtype=torch.float64).view_as(y)[lo:lo + r + 1]
    torch.testing.assert_close(x.grad, want)  # Horovod averages the identical gradients
    x = torch.ones(2 * n, dtype=torch.float64, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Sum, process_set=mine).backward(
        torch.ones(2, dtype=torch.float64))
    assert x.grad.tolist() == [float(n)] * (2 * n)  # times the set's size for Sum
    root = mine.ranks[-1]  # a global rank
    x = torch.full((4,), float(r), dtype=torch.float64, requires_grad=True)
    hvd.broadcast(x, root, process_set=mine).backward(torch.full((4,), 2.0, dtype=torch.float64))
    assert x.grad.tolist() == [2.0 if r == root else 0.0] * 4  # averaged over the set
    x = (torch.arange(float(3 * n), dtype=torch.float64) + 100 * r).requires_grad_(True)
    y, _ = hvd.alltoall(x, splits=[3] * n, process_set=mine)
    y.backward(y.detach() * 2)  # sent back where it came from
    torch.testing.assert_close(x.grad, x.detach() * 2)


def test_sparse_allreduce_over_a_set(even_odd):
    even, odd, mine = even_odd
    r = hvd.rank()
    dense = torch.zeros(6, 2)
    dense[r % 6] = r + 1.0
    got = hvd.sparse_allreduce_async(dense.to_sparse(), "sp", hvd.Average, mine)()
    want = torch.zeros(6, 2)
    for q in mine.ranks:
        want[q % 6] += (q + 1.0) / mine.size()
    torch.testing.assert_close(got.to_dense(), want)


def test_same_name_in_two_sets_and_the_global_set_at_once(even_odd):
    even, odd, mine = even_odd
    r, n = hvd.rank(), hvd.size()
    t = torch.full((8,), float(r + 1))
    in_set = hvd.allreduce_async(t, op=hvd.Sum, name="shared.name", process_set=mine)
    in_world = hvd.allreduce_async(t * 10, op=hvd.Sum, name="shared.name")
    assert hvd.synchronize(in_world).tolist() == [10.0 * n * (n + 1) / 2] * 8
    assert hvd.synchronize(in_set).tolist() == [float(sum(q + 1 for q in mine.ranks))] * 8


def topk1_reference(inputs, residuals, key):
    """Top-1 of 4 with error feedback (compression/topk_compressor.h), summed
    over the ranks in `inputs` (rank -> tensor); residuals[(rank, key)] kept."""
    out = torch.zeros(4)
    for q, x in inputs.items():
        acc = x + residuals.get((q, key), torch.zeros(4))
        i = int(torch.argmax(acc.abs()))  # first of equal magnitudes
        out[i] += acc[i]
        acc[i] = 0
        residuals[(q, key)] = acc
    return out


def test_error_feedback_residuals_are_per_set(even_odd):
    """One name compressed in the global set and in this rank's set keeps two
    residuals: each result is what the reference gets with one residual per
    (set, name); a residual shared between the sets gives other sums."""
    even, odd, mine = even_odd
    if min(len(even.ranks), len(odd.ranks)) < 2:
        pytest.skip("needs two ranks in each set")  # on every rank alike
    topk = tutti.Compression.topk(0.25)  # k = 1 of 4
    residuals = {}
    for step in range(4):
        x = {q: values(q, (4,), torch.float32, seed=step) for q in range(hvd.size())}
        y = {q: values(q, (4,), torch.float32, seed=10 + step) for q in range(hvd.size())}
        got = hvd.allreduce(x[hvd.rank()], op=hvd.Sum, name="ef.shared", compression=topk)
        assert got.tolist() == topk1_reference(x, residuals, "world").tolist()
        got = hvd.allreduce(y[hvd.rank()], op=hvd.Sum, name="ef.shared", compression=topk,
                            process_set=mine)
        want = topk1_reference({q: y[q] for q in mine.ranks}, residuals, mine.process_set_id)
        assert got.tolist() == want.tolist()


def test_overlapping_sets_never_deadlock():
    n, r = hvd.size(), hvd.rank()
    if n < 3:
        pytest.skip("overlapping sets need 3 ranks")
    # Chained pairs: rank q (0 < q < n - 1) is in two sets, and issues its two
    # ops in opposite orders on neighbouring ranks.
    pairs = [hvd.add_process_set([q, q + 1]) for q in range(n - 1)]
    try:
        mine = [ps for ps in pairs if ps.included()]
        if r % 2:
            mine.reverse()
        handles = [(ps, hvd.allreduce_async(torch.full((1000,), float(r + 1)), op=hvd.Sum,
                                            name="overlap", process_set=ps))
                   for ps in mine]
        handles.append((hvd.global_process_set,
                        hvd.allgather_async(torch.tensor([r]), name="overlap")))
        for ps, h in handles:
            want = sum(q + 1.0 for q in ps.ranks)
            got = hvd.synchronize(h)
            if ps is hvd.global_process_set:
                assert got.tolist() == list(range(n))
            else:
                assert got.eq(want).all()
    finally:
        for ps in pairs:
            hvd.remove_process_set(ps)


def test_sets_of_one_rank():
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        pytest.skip("a set of one rank is the global set at size 1")
    singles = [hvd.add_process_set([q]) for q in range(n)]
    try:
        me = singles[r]
        assert me.size() == 1 and me.rank() == 0
        t = torch.arange(6.0).view(3, 2) + r
        assert torch.equal(hvd.allreduce(t, op=hvd.Sum, process_set=me), t)
        assert torch.equal(hvd.allgather(t, process_set=me), t)
        assert torch.equal(hvd.broadcast(t, r, process_set=me), t)
        assert torch.equal(hvd.alltoall(t, process_set=me), t)
        assert torch.equal(hvd.reducescatter(t, op=hvd.Sum, process_set=me), t)
        hvd.barrier(process_set=me)
        assert hvd.allgather_object({"r": r}, process_set=me) == [{"r": r}]
    finally:
        for ps in singles:
            hvd.remove_process_set(ps)


def test_object_collectives_and_broadcast_parameters(even_odd):
    even, odd, mine = even_odd
    r = hvd.rank()
    root = mine.ranks[-1]
    assert hvd.broadcast_object({"from": r}, root, process_set=mine) == {"from": root}
    assert hvd.allgather_object(("r", r), process_set=mine) == [("r", q) for q in mine.ranks]
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.fill_(100 * r + i)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root, process_set=mine)
    assert [p.unique().tolist() for p in model.parameters()] == [[100.0 * root], [100.0 * root + 1]]
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.5)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=mine)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * (root + 1))


def test_distributed_optimizer_over_a_set_leaves_the_others_alone():
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        pytest.skip("needs 2 ranks")
    # The set is every rank but the last; the last rank trains alone.
    group = hvd.add_process_set(range(n - 1))
    try:
        torch.manual_seed(5)
        model = torch.nn.Linear(4, 1)
        start = [p.detach().clone() for p in model.parameters()]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                       named_parameters=model.named_parameters(),
                                       process_set=group)
        x = torch.full((2, 4), float(r + 1))
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        # Reference without tutti: the gradient of sum(w x + b) is (sum x, rows).
        def grads(q):
            return [torch.full((1, 4), 2.0 * (q + 1)), torch.full((1,), 2.0)]
        members = group.ranks if group.included() else [r]
        avg = [sum(g) / len(members) for g in zip(*[grads(q) for q in members])]
        for p, s, g in zip(model.parameters(), start, avg):
            torch.testing.assert_close(p.detach(), s - 0.5 * g)
        every = hvd.allgather(torch.cat([p.detach().view(-1) for p in model.parameters()])[None])
        assert torch.equal(every[:n - 1], every[:1].expand(n - 1, -1))  # the set's ranks agree
        assert not torch.equal(every[-1], every[0])  # the last rank's own step
    finally:
        hvd.remove_process_set(group)


def test_sync_batch_norm_over_a_set(even_odd):
    even, odd, mine = even_odd
    r = hvd.rank()
    xs = {q: torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(q),
                         dtype=torch.float64) + q for q in mine.ranks}
    sync = hvd.SyncBatchNorm(2, process_group=mine).double()
    ref = torch.nn.BatchNorm1d(2).double()
    x = xs[r].clone().requires_grad_(True)
    full = torch.cat([xs[q] for q in mine.ranks]).requires_grad_(True)
    sync(x).pow(2).sum().backward()
    y_ref = ref(full)
    y_ref.pow(2).sum().backward()
    i = mine.rank()
    torch.testing.assert_close(sync(x.detach()).detach(), ref(full.detach())[3 * i:3 * i + 3],
                               rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(x.grad, full.grad[3 * i:3 * i + 3], rtol=1e-9, atol=1e-9)
    converted = hvd.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm1d(2), mine)
    assert converted.process_group is mine
    with pytest.raises(ValueError, match="not registered"):
        hvd.SyncBatchNorm(2, process_group=hvd.ProcessSet([0]))


def test_init_with_static_process_sets_lifecycle():
    """hvd.init(process_sets=[...]) after a shutdown: the sets are registered
    in order with their ids; duplicates raise ValueError (Horovod's rule);
    leaving (shutdown, an elastic reset) invalidates them. Named *lifecycle* so that conftest runs it last."""
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        pytest.skip("needs 2 ranks")
    hvd.barrier()
    hvd.shutdown()
    even, odd = hvd.ProcessSet(range(0, n, 2)), hvd.ProcessSet(range(1, n, 2))
    hvd.init(process_sets=[even, odd])
    try:
        assert (even.process_set_id, odd.process_set_id) == (1, 2)
        mine = even if even.included() else odd
        got = hvd.allreduce(torch.tensor([r + 1.0]), op=hvd.Sum, process_set=mine)
        assert got.item() == sum(q + 1.0 for q in mine.ranks)
    finally:
        hvd.barrier()  # a rank's shutdown cancels what the job still has pending
        # What an elastic reset calls (outside an elastic job: shutdown()).
        tutti.elastic.leave()
    assert even.process_set_id is None and odd.process_set_id is None  # invalidated
    dup = hvd.ProcessSet(range(n))  # the global set's ranks
    again = hvd.ProcessSet([0])
    with pytest.raises(ValueError, match="entry number 1 is a duplicate"):
        hvd.init(process_sets=[again, dup])
    assert hvd.is_initialized() and dup.process_set_id is None and again.process_set_id == 1
    assert hvd.remove_process_set(again)
    with pytest.raises(ValueError):
        hvd.init(process_sets=["not a set"])
    hvd.init(process_sets="dynamic")  # Horovod's opt-in: accepted, nothing to do
    with pytest.raises(ValueError):
        hvd.init(comm=[0, 1])
    assert list(itertools.islice(tutti.process_sets.process_sets(), 2)) == [hvd.global_process_set]

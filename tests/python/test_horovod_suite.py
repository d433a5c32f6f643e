"""Horovod 0.28.1's own PyTorch test cases (test/parallel/test_torch.py), CPU
part, ported to tutti: what a Horovod user's suite asserts about the ops.

Process-set and GPU cases are left out (docs/horovod.md); Adasum's are in
test_adasum.py. Every rank runs every test in the same order; tests that
need two ranks are skipped on every rank of a job of one (the job size is
the same everywhere). Each test names its ops, so a failed op cannot be
matched with the next test's.
The optimizer, state, join and object cases: test_horovod_suite_optim.py.
"""

import itertools
import time

import numpy as np
import pytest
import torch

import tutti.torch as hvd

INTS = [torch.int32, torch.int64]
REDUCE_TYPES = INTS + [torch.float32, torch.float64, torch.float16]
ALL_TYPES = [torch.uint8, torch.int8, torch.int16] + REDUCE_TYPES
GRAD_TYPES = [torch.float32, torch.float64]
DIMS = [1, 2, 3]


def _random(shape, dtype, seed=1234):
    torch.manual_seed(seed)
    return torch.empty(shape).random_(-100, 100).to(dtype)


def _f32(*tensors):
    """fp16 CPU tensors as float32 for comparisons (as Horovod's tests)."""
    return [t.float() if t.dtype == torch.float16 else t for t in tensors]


def _need_two():
    if hvd.size() == 1:
        pytest.skip("needs more than one rank (skipped on every rank)")


def _cases(dtypes):
    return list(itertools.product(dtypes, DIMS))


def _scaled_reference(tensor, factor, dtype):
    """Horovod's CPU scaling: integers in float64, fp16 in float32."""
    work = torch.float64 if dtype in INTS else (torch.float32 if dtype == torch.float16 else dtype)
    return (torch.tensor(factor, dtype=work) * tensor.to(work)).to(dtype)


def _fp16_rtol(dtype):
    """Horovod's reference adds float16 inputs in float32; beyond two ranks
    the fp16 sum rounds (Horovod's own test assumes exactness: its CI runs 2)."""
    return 1e-3 if dtype == torch.float16 and hvd.size() > 2 else 0


# ---------------------------------------------------------------- allreduce

@pytest.mark.parametrize("dtype,dim", _cases(REDUCE_TYPES))
def test_allreduce_sum_and_inplace(dtype, dim):
    tensor = _random([17] * dim, dtype)
    summed = hvd.allreduce(tensor, average=False, name="hs.ar.sum")
    t, s = _f32(tensor, summed)
    assert torch.equal(s, t * hvd.size())
    inplace = tensor.clone()
    hvd.allreduce_(inplace, average=False, name="hs.ar.inplace")
    assert torch.equal(_f32(inplace)[0], t * hvd.size())


@pytest.mark.parametrize("dtype,dim", _cases([torch.int32, torch.int64, torch.float32,
                                              torch.float64]))
def test_allreduce_average(dtype, dim):
    tensor = _random([17] * dim, dtype)
    averaged = hvd.allreduce(tensor, average=True, name="hs.ar.avg")
    assert torch.equal(averaged, tensor)


@pytest.mark.parametrize("op,ref", [(hvd.Min, lambda t: t.min(0).values),
                                    (hvd.Max, lambda t: t.max(0).values),
                                    (hvd.Product, lambda t: t.prod(0))])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
def test_allreduce_min_max_product(op, ref, dtype):
    for dim in DIMS:
        every = _random([hvd.size()] + [17] * dim, dtype)
        result = hvd.allreduce(every[hvd.rank()], op=op, name="hs.ar.op%d" % dim)
        assert torch.equal(result, ref(every).to(dtype))


@pytest.mark.parametrize("where", ["prescale", "postscale"])
@pytest.mark.parametrize("dtype,dim", _cases(REDUCE_TYPES))
def test_allreduce_scaling(where, dtype, dim):
    factor = np.random.RandomState(1234).uniform()
    tensor = _random([17] * dim, dtype)
    summed = hvd.allreduce(tensor, average=False, name="hs.ar." + where,
                           **{where + "_factor": factor})
    if where == "prescale":
        expected = _f32(_scaled_reference(tensor, factor, dtype))[0] * hvd.size()
    else:
        expected = _f32(_scaled_reference(tensor * hvd.size(), factor, dtype))[0]
    assert torch.allclose(_f32(summed)[0], expected, _fp16_rtol(dtype))


def _async_ops_start():
    """Ranks other than 0 submit a moment later, so that rank 0 sees its ops
    pending (tutti may complete an op at once when every peer is there)."""
    if hvd.rank() != 0:
        time.sleep(0.05)


def test_allreduce_async_fused():
    handles, pending = [], False
    _async_ops_start()
    for i, (dtype, dim) in enumerate(_cases(REDUCE_TYPES)):
        tensor = _random([17] * dim, dtype)
        handle = hvd.allreduce_async(tensor, average=False, name="hs.fused.%d" % i)
        pending = pending or not hvd.poll(handle)
        handles.append((handle, _f32(tensor)[0] * hvd.size()))
    # At one rank no op waits for a peer: it may finish before the poll.
    assert pending or hvd.rank() != 0 or hvd.size() == 1, \
        "hvd.poll() always returns True, not an async op?"
    for handle, expected in handles:
        assert torch.equal(_f32(hvd.synchronize(handle))[0], expected)


def _mismatch_errors(op, prefix):
    """Ranks disagree on the shape, on the number of dimensions, on the type:
    each raises RuntimeError (HorovodInternalError) on every rank."""
    rank = hvd.rank()
    with pytest.raises(RuntimeError):
        op(_random([17 + rank] * 3, torch.float32), name=prefix + ".err.dims")
    shape = [17, 23 * 57] if rank == 0 else [17, 23, 57]
    with pytest.raises(RuntimeError):
        op(_random(shape, torch.float32), name=prefix + ".err.rank")
    dtype = torch.int32 if rank % 2 == 0 else torch.float32
    with pytest.raises(RuntimeError):
        op(torch.zeros([17] * 3, dtype=dtype), name=prefix + ".err.type")


def test_allreduce_mismatch_errors():
    _need_two()
    _mismatch_errors(hvd.allreduce, "hs.ar")


def _duplicate_name(start, name, **kwargs):
    """Horovod's duplicate-name case: rank 0, then the others, submit a name
    twice while its op is in flight; the second raises ValueError. Rank 0
    uses `name`, the others `name + ".b"`, which no peer has submitted yet
    (an op whose peers all submitted may complete at once, which frees its
    name); each rank then submits the other name so that both complete. The
    assertions come after the collectives, so a failure hangs no peer."""
    tensor = torch.zeros([17] * 3)
    mine, other = (name, name + ".b") if hvd.rank() == 0 else (name + ".b", name)
    raised = False
    for turn in (0, 1):
        if (hvd.rank() == 0) == (turn == 0):
            first = start(tensor, name=mine, **kwargs)
            try:
                start(tensor, name=mine, **kwargs)
            except ValueError:
                raised = True
        hvd.barrier()
    hvd.synchronize(start(tensor, name=other, **kwargs))
    hvd.synchronize(first)
    assert raised, "a second op named %r in flight did not raise ValueError" % mine


def test_duplicate_name_errors():
    _need_two()
    _duplicate_name(hvd.allreduce_async, "hs.dup.allreduce")
    _duplicate_name(hvd.allgather_async, "hs.dup.allgather")
    _duplicate_name(hvd.broadcast_async, "hs.dup.broadcast", root_rank=0)
    _duplicate_name(hvd.reducescatter_async, "hs.dup.reducescatter")
    assert issubclass(hvd.DuplicateNameError, ValueError)


@pytest.mark.parametrize("average,factor", [(False, None), (True, 1)])
@pytest.mark.parametrize("dtype,dim", _cases(GRAD_TYPES))
def test_allreduce_grad(average, factor, dtype, dim):
    tensor = _random([17] * dim, dtype).requires_grad_()
    out = hvd.allreduce(tensor, average=average, name="hs.ar.grad")
    out.backward(torch.ones([17] * dim, dtype=dtype))
    expected = np.ones([17] * dim) * (factor or hvd.size())
    assert np.linalg.norm(expected - tensor.grad.numpy()) < 1e-8


# -------------------------------------------------------- grouped allreduce

@pytest.mark.parametrize("dtype,dim", _cases(REDUCE_TYPES))
def test_grouped_allreduce(dtype, dim):
    tensors = [_random([17] * dim, dtype, seed) for seed in range(5)]
    size = hvd.size()
    summed = hvd.grouped_allreduce(tensors, average=False, name="hs.gar.sum")
    assert all(torch.equal(*_f32(s, t * size)) for s, t in zip(summed, tensors))
    averaged = hvd.grouped_allreduce(tensors, average=True, name="hs.gar.avg")
    assert all(torch.allclose(*_f32(a, t)) for a, t in zip(averaged, tensors))
    inplace = [t.clone() for t in tensors]
    hvd.grouped_allreduce_(inplace, average=False, name="hs.gar.inplace")
    assert all(torch.equal(*_f32(i, t * size)) for i, t in zip(inplace, tensors))


@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize("dtype,dim", _cases(GRAD_TYPES))
def test_grouped_allreduce_grad(average, dtype, dim):
    tensors = [_random([17] * dim, dtype, s).requires_grad_() for s in range(5)]
    summed = hvd.grouped_allreduce(tensors, average=average, name="hs.gar.grad")
    for s in summed:
        s.backward(torch.ones([17] * dim, dtype=dtype))
    expected = np.ones([17] * dim) * (1 if average else hvd.size())
    for t in tensors:
        assert np.linalg.norm(expected - t.grad.numpy()) < 1e-8


# ---------------------------------------------------------------- allgather

def _check_gathered(gathered, sizes, dim):
    assert list(gathered.shape) == [sum(sizes)] + [17] * (dim - 1)
    start = 0
    for r, n in enumerate(sizes):
        block = _f32(gathered[start:start + n])[0]
        start += n
        assert list(block.shape) == [n] + [17] * (dim - 1)
        assert block.min() == r and block.max() == r


@pytest.mark.parametrize("variable", [False, True])
@pytest.mark.parametrize("dtype,dim", _cases(ALL_TYPES))
def test_allgather(variable, dtype, dim):
    sizes = ([17, 32, 81, 12, 15, 23, 22] * 5)[:hvd.size()] if variable else [17] * hvd.size()
    rank = hvd.rank()
    tensor = torch.ones([sizes[rank]] + [17] * (dim - 1)).mul_(rank).to(dtype)
    _check_gathered(hvd.allgather(tensor, name="hs.ag"), sizes, dim)
    grouped = hvd.grouped_allgather([tensor] * 3, name="hs.gag")
    for g in grouped:
        _check_gathered(g, sizes, dim)


def test_allgather_async_fused():
    handles, pending = [], False
    _async_ops_start()
    for i, (dtype, dim) in enumerate(_cases(ALL_TYPES)):
        tensor = torch.ones([17] * dim).mul_(hvd.rank()).to(dtype)
        handle = hvd.allgather_async(tensor, name="hs.ag.fused.%d" % i)
        pending = pending or not hvd.poll(handle)
        handles.append((handle, dim))
    # At one rank no op waits for a peer: it may finish before the poll.
    assert pending or hvd.rank() != 0 or hvd.size() == 1, \
        "hvd.poll() always returns True, not an async op?"
    for handle, dim in handles:
        _check_gathered(hvd.synchronize(handle), [17] * hvd.size(), dim)


def test_allgather_errors():
    _need_two()
    shape = [17, 10 * (hvd.rank() + 1), 17]
    with pytest.raises(RuntimeError):
        hvd.allgather(torch.ones(shape), name="hs.ag.err.shape")
    dtype = torch.int32 if hvd.rank() % 2 == 0 else torch.float32
    with pytest.raises(RuntimeError):
        hvd.allgather(torch.zeros([17] * 3, dtype=dtype), name="hs.ag.err.type")


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("dtype,dim", _cases(GRAD_TYPES))
def test_allgather_grad(grouped, dtype, dim):
    sizes = ([3, 2, 7, 4, 6, 8, 10] * 5)[:hvd.size()]
    rank = hvd.rank()
    tail = [17] * (dim - 1)
    tensors = [torch.ones([sizes[rank]] + tail, dtype=dtype).mul_(rank).requires_grad_()
               for _ in range(3 if grouped else 1)]
    grad_ys = torch.cat([torch.ones([n] + tail, dtype=dtype) * r for r, n in enumerate(sizes)])
    if grouped:
        gathered = hvd.grouped_allgather(tensors, name="hs.gag.grad")
    else:
        gathered = [hvd.allgather(tensors[0], name="hs.ag.grad")]
    for g in gathered:
        g.backward(grad_ys)
    expected = np.ones([sizes[rank]] + tail) * rank
    for t in tensors:
        assert np.linalg.norm(expected - t.grad.numpy()) < 1e-8


# ---------------------------------------------------------------- broadcast

@pytest.mark.parametrize("dtype,dim", _cases(ALL_TYPES))
def test_broadcast_and_inplace(dtype, dim):
    _need_two()
    rank = hvd.rank()
    for root in range(hvd.size()):
        tensor = torch.ones([17] * dim).mul_(rank).to(dtype)
        root_tensor = torch.ones([17] * dim).mul_(root).to(dtype)
        out = hvd.broadcast(tensor, root, name="hs.bc")
        t, r, o = _f32(tensor, root_tensor, out)
        if rank != root:
            assert (t == r).max() == 0, "hvd.broadcast modifies source tensor"
        assert (o == r).min() == 1
        result = hvd.broadcast_(tensor, root, name="hs.bc.inplace")
        assert result is tensor or torch.equal(result, tensor)
        assert torch.equal(*_f32(tensor, root_tensor))


def test_broadcast_errors():
    _need_two()
    rank = hvd.rank()
    with pytest.raises(RuntimeError):
        hvd.broadcast(torch.ones([17, 10 * (rank + 1), 17]), 0, name="hs.bc.err.shape")
    dtype = torch.int32 if rank % 2 == 0 else torch.float32
    with pytest.raises(RuntimeError):
        hvd.broadcast(torch.zeros([17] * 3, dtype=dtype), 0, name="hs.bc.err.type")
    with pytest.raises(RuntimeError):
        hvd.broadcast(torch.ones([17] * 3), rank, name="hs.bc.err.root")


@pytest.mark.parametrize("dtype,dim", _cases(GRAD_TYPES))
def test_broadcast_grad(dtype, dim):
    _need_two()
    rank = hvd.rank()
    for root in range(hvd.size()):
        tensor = torch.ones([17] * dim, dtype=dtype).mul_(rank).requires_grad_()
        out = hvd.broadcast(tensor, root, name="hs.bc.grad")
        out.backward(torch.ones([17] * dim, dtype=dtype))
        expected = np.ones([17] * dim) * (1 if rank == root else 0)
        assert np.linalg.norm(expected - tensor.grad.numpy()) < 1e-8


# ----------------------------------------------------------------- alltoall

def _alltoall_input(dim, dtype):
    """Rank r sends r + 1 rows to every rank; rows for rank i hold i."""
    rank = hvd.rank()
    tensor = torch.tensor([float(i) for i in range(hvd.size()) for _ in range(rank + 1)])
    for _ in range(dim - 1):
        tensor = torch.cat((tensor.unsqueeze(1), tensor.unsqueeze(1)), dim=1)
    return tensor.to(dtype)


@pytest.mark.parametrize("dtype,dim", _cases(ALL_TYPES))
def test_alltoall_splits(dtype, dim):
    size, rank = hvd.size(), hvd.rank()
    tensor = _alltoall_input(dim, dtype)
    splits = torch.tensor([rank + 1] * size, dtype=torch.int32)
    collected, received = hvd.alltoall(tensor, splits, name="hs.a2a")
    collected = _f32(collected)[0]
    assert collected.min() == rank and collected.max() == rank
    assert collected.numel() == size * (size + 1) // 2 * 2 ** (dim - 1)
    assert received.tolist() == [r + 1 for r in range(size)]


@pytest.mark.parametrize("dtype,dim", _cases(ALL_TYPES))
def test_alltoall_equal_split(dtype, dim):
    size, rank = hvd.size(), hvd.rank()
    tensor = torch.tensor([float(i) for i in range(size)])
    for _ in range(dim - 1):
        tensor = torch.cat((tensor.unsqueeze(1), tensor.unsqueeze(1)), dim=1)
    collected = _f32(hvd.alltoall(tensor.to(dtype), name="hs.a2a.equal"))[0]
    assert collected.min() == rank and collected.max() == rank
    assert collected.numel() == size * 2 ** (dim - 1)


def test_alltoall_errors():
    size = hvd.size()
    with pytest.raises(ValueError):
        hvd.alltoall(torch.empty(size - 1), torch.ones(size, dtype=torch.int32),
                     name="hs.a2a.err.sum")
    with pytest.raises(ValueError):
        hvd.alltoall(torch.empty(size), torch.ones(size, dtype=torch.float32),
                     name="hs.a2a.err.splits_type")
    if size == 1:
        return
    with pytest.raises(ValueError):
        hvd.alltoall(torch.empty(size + 1), name="hs.a2a.err.equal")
    dtype = torch.int32 if hvd.rank() % 2 else torch.float32
    with pytest.raises(RuntimeError):
        hvd.alltoall(torch.empty(size, dtype=dtype), name="hs.a2a.err.type")
    shape = [2 * size, 10 * (hvd.rank() + 1), 2 * size]
    with pytest.raises(RuntimeError):
        hvd.alltoall(torch.ones(shape), name="hs.a2a.err.shape")


@pytest.mark.parametrize("with_splits", [True, False])
@pytest.mark.parametrize("dtype,dim", _cases(GRAD_TYPES))
def test_alltoall_grad(with_splits, dtype, dim):
    tensor = _alltoall_input(dim, dtype)
    if not with_splits:
        tensor = tensor[:hvd.size()].contiguous()
    tensor.requires_grad_()
    if with_splits:
        splits = torch.tensor([hvd.rank() + 1] * hvd.size(), dtype=torch.int32)
        collected, _ = hvd.alltoall(tensor, splits, name="hs.a2a.grad")
    else:
        collected = hvd.alltoall(tensor, name="hs.a2a.grad.equal")
    collected.backward(torch.ones(collected.shape, dtype=dtype))
    assert np.linalg.norm(np.ones(tensor.shape) - tensor.grad.numpy()) < 1e-8


# ------------------------------------------------------------ reducescatter

def _scattered(tensor):
    return tensor[hvd.rank() * 4:(hvd.rank() + 1) * 4]


@pytest.mark.parametrize("dtype,dim", _cases(REDUCE_TYPES))
def test_reducescatter_sum_average(dtype, dim):
    size = hvd.size()
    tensor = _random([size * 4] * dim, dtype)
    summed = hvd.reducescatter(tensor, op=hvd.Sum, name="hs.rs.sum")
    expected = _f32(_scattered(tensor))[0] * size
    assert list(summed.shape) == list(expected.shape)
    assert (_f32(summed)[0] - expected).abs().max() == 0
    grouped = hvd.grouped_reducescatter([tensor] * 3, op=hvd.Sum, name="hs.grs.sum")
    assert all(torch.equal(_f32(g)[0], expected) for g in grouped)
    if dtype != torch.float16:
        averaged = hvd.reducescatter(tensor, op=hvd.Average, name="hs.rs.avg")
        assert torch.equal(averaged, _scattered(tensor))


@pytest.mark.parametrize("where", ["prescale", "postscale"])
@pytest.mark.parametrize("dtype,dim", _cases(REDUCE_TYPES))
def test_reducescatter_scaling(where, dtype, dim):
    size = hvd.size()
    factor = np.random.RandomState(12345).uniform()
    tensor = _random([size * 4] * dim, dtype)
    kwargs = {where + "_factor": factor}
    out = hvd.reducescatter(tensor, op=hvd.Sum, name="hs.rs." + where, **kwargs)
    grouped = hvd.grouped_reducescatter([tensor] * 2, op=hvd.Sum, name="hs.grs." + where,
                                        **kwargs)
    if where == "prescale":
        expected = _f32(_scattered(_scaled_reference(tensor, factor, dtype)))[0] * size
    else:
        expected = _f32(_scattered(_scaled_reference(tensor * size, factor, dtype)))[0]
    for result in [out] + list(grouped):
        assert torch.allclose(_f32(result)[0], expected, _fp16_rtol(dtype))


def test_reducescatter_async_fused():
    handles, pending = [], False
    _async_ops_start()
    for i, (dtype, dim) in enumerate(_cases(REDUCE_TYPES)):
        tensor = _random([hvd.size() * 4] * dim, dtype)
        handle = hvd.reducescatter_async(tensor, op=hvd.Sum, name="hs.rs.fused.%d" % i)
        pending = pending or not hvd.poll(handle)
        handles.append((handle, _f32(_scattered(tensor))[0] * hvd.size()))
    # At one rank no op waits for a peer: it may finish before the poll.
    assert pending or hvd.rank() != 0 or hvd.size() == 1, \
        "hvd.poll() always returns True, not an async op?"
    for handle, expected in handles:
        assert torch.equal(_f32(hvd.synchronize(handle))[0], expected)


def test_reducescatter_errors():
    scalar_errors = (RuntimeError, hvd.HorovodInternalError, ValueError)
    with pytest.raises(scalar_errors):
        hvd.reducescatter(torch.tensor(float(hvd.rank())), op=hvd.Average, name="hs.rs.scalar")
    with pytest.raises(scalar_errors):
        hvd.grouped_reducescatter([torch.tensor(float(hvd.rank())), torch.zeros((3, 1))],
                                  name="hs.grs.scalar")
    if hvd.size() > 1:
        _mismatch_errors(hvd.reducescatter, "hs.rs")


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
@pytest.mark.parametrize("dtype,dim", _cases(GRAD_TYPES + [torch.float16]))
def test_reducescatter_grad(op, dtype, dim):
    size = hvd.size()
    tensor = _random([size * 4] * dim, dtype).requires_grad_()
    out = hvd.reducescatter(tensor, op=op, name="hs.rs.grad")
    out.backward(torch.ones([4] + [size * 4] * (dim - 1), dtype=dtype))
    expected = np.ones([size * 4] * dim) * (size if op == hvd.Sum else 1)
    assert np.linalg.norm(expected - tensor.grad.float().numpy()) < 1e-8

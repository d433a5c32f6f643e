"""Gradients of the blocking collectives, with Horovod's conventions
(tutti.torch.autograd; horovod/torch/mpi_ops.py 0.28.1). Each test backpropagates
an output gradient that differs per rank and compares the input gradient with
a reference computed here with plain torch from what every rank passed."""

import pytest
import torch

import tutti.torch as hvd
from test_collectives import HorovodStyleFP16

SCALES = [(1.0, 1.0), (0.5, 3.0)]


def r_s():
    return hvd.rank(), hvd.size()


def data(q, shape, seed=0):
    """Rank q's input: distinct, non-uniform values."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float64).reshape(shape) * (q + 2) - 3 * q + seed) / 4


def grad(q, shape, seed=0):
    """Rank q's output gradient: other non-uniform values."""
    return data(q, shape, seed + 100) * (-1) ** q + 0.5


def leaf(q, shape, seed=0):
    return data(q, shape, seed).requires_grad_(True)


def close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)


def reduced(values, op, pre, post):
    """post * op(pre * values), op Sum or Average."""
    total = sum(values)
    return post * pre * (total / len(values) if op == hvd.Average else total)


def rows_of(q, d0, s):
    """(offset, rows) of rank q's part of a reducescatter of d0 rows."""
    rows = [d0 // s + (p < d0 % s) for p in range(s)]
    return sum(rows[:q]), rows[q]


# ---- allreduce ----------------------------------------------------------------------


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
@pytest.mark.parametrize("pre,post", SCALES)
def test_allreduce_gradient_is_the_same_allreduce_of_the_gradient(op, pre, post):
    r, s = r_s()
    x = leaf(r, (2, 3))
    y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post,
                      process_set=hvd.global_process_set)
    close(y, reduced([data(q, (2, 3)) for q in range(s)], op, pre, post))
    y.backward(grad(r, (2, 3)))
    close(x.grad, reduced([grad(q, (2, 3)) for q in range(s)], op, pre, post))


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
def test_grouped_allreduce_gradients(op):
    r, s = r_s()
    shapes = [(3,), (2, 2)]
    xs = [leaf(r, shape, seed=i) for i, shape in enumerate(shapes)]
    ys = hvd.grouped_allreduce(xs, op=op, prescale_factor=2.0, postscale_factor=0.25)
    assert all(y.grad_fn is not None for y in ys)
    torch.autograd.backward(ys, [grad(r, shape, seed=i) for i, shape in enumerate(shapes)])
    for i, (x, y, shape) in enumerate(zip(xs, ys, shapes)):
        close(y, reduced([data(q, shape, seed=i) for q in range(s)], op, 2.0, 0.25))
        close(x.grad, reduced([grad(q, shape, seed=i) for q in range(s)], op, 2.0, 0.25))


def test_allreduce_with_a_horovod_style_compressor_is_differentiable():
    # The compressor casts to float16 around the allreduce, as Horovod's
    # FP16Compressor: the gradient flows through the casts too.
    r, s = r_s()
    x = torch.full((4,), float(r + 1), dtype=torch.float64, requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum, compression=HorovodStyleFP16)
    assert y.dtype == torch.float64
    close(y, torch.full((4,), float(s * (s + 1) // 2), dtype=torch.float64))
    y.backward(torch.full((4,), float(r + 2), dtype=torch.float64))
    close(x.grad, torch.full((4,), float(sum(q + 2 for q in range(s))), dtype=torch.float64))


# ---- allgather ----------------------------------------------------------------------


def allgather_reference(r, s, shape_of, seed=0):
    """(gathered input, input gradient): Horovod's gradient is this rank's rows
    of the average over ranks of the output gradient."""
    gathered = torch.cat([data(q, shape_of(q), seed) for q in range(s)])
    total = gathered.shape[0]
    mean = sum(grad(q, (total,) + gathered.shape[1:], seed) for q in range(s)) / s
    offset = sum(shape_of(q)[0] for q in range(r))
    return gathered, mean[offset:offset + shape_of(r)[0]]


def test_allgather_gradient_uneven_first_dimensions():
    r, s = r_s()

    def shape_of(q):
        return (q + 1, 2)

    x = leaf(r, shape_of(r))
    y = hvd.allgather(x, process_set=hvd.global_process_set)
    want_y, want_grad = allgather_reference(r, s, shape_of)
    close(y, want_y)
    y.backward(grad(r, tuple(y.shape)))
    close(x.grad, want_grad)


def test_grouped_allgather_gradients_uneven_first_dimensions():
    r, s = r_s()
    shape_ofs = [lambda q: (q + 1, 2), lambda q: (2 * q + 1,)]
    xs = [leaf(r, shape_of(r), seed=i) for i, shape_of in enumerate(shape_ofs)]
    ys = hvd.grouped_allgather(xs)
    assert all(y.grad_fn is not None for y in ys)
    torch.autograd.backward(ys, [grad(r, tuple(y.shape), seed=i) for i, y in enumerate(ys)])
    for i, (x, y, shape_of) in enumerate(zip(xs, ys, shape_ofs)):
        want_y, want_grad = allgather_reference(r, s, shape_of, seed=i)
        close(y, want_y)
        close(x.grad, want_grad)


# ---- broadcast ----------------------------------------------------------------------


def test_broadcast_gradient_is_the_average_on_the_root_and_zero_elsewhere():
    r, s = r_s()
    for root in range(s):
        x = leaf(r, (4,), seed=root)
        y = hvd.broadcast(x, root, process_set=hvd.global_process_set)
        close(y, data(root, (4,), seed=root))
        y.backward(grad(r, (4,), seed=root))
        mean = sum(grad(q, (4,), seed=root) for q in range(s)) / s
        close(x.grad, mean if r == root else torch.zeros(4, dtype=torch.float64))


# ---- alltoall -----------------------------------------------------------------------


def test_alltoall_gradient_goes_back_with_the_received_splits():
    r, s = r_s()

    def splits_of(q):  # uneven, with zeros from np 2 on
        return [(q + 2 * p + 1) % 3 for p in range(s)]

    def sent(q, p, values):  # the rows of rank q's `values` that go to rank p
        return values[sum(splits_of(q)[:p]):][:splits_of(q)[p]]

    x = leaf(r, (sum(splits_of(r)), 2))
    y, received = hvd.alltoall(x, splits=torch.tensor(splits_of(r), dtype=torch.int32))
    assert received.tolist() == [splits_of(q)[r] for q in range(s)]
    assert not received.requires_grad
    close(y, torch.cat([sent(q, r, data(q, (sum(splits_of(q)), 2))) for q in range(s)]))
    y.backward(grad(r, tuple(y.shape)))

    def grad_at(p):  # rank p's output gradient, its rows by source rank
        rows = [splits_of(q)[p] for q in range(s)]
        return grad(p, (sum(rows), 2)), rows

    pieces = []
    for p in range(s):
        g, rows = grad_at(p)
        pieces.append(g[sum(rows[:r]):][:rows[r]])
    close(x.grad, torch.cat(pieces))


def test_alltoall_without_splits_returns_a_differentiable_tensor():
    r, s = r_s()
    x = leaf(r, (2 * s, 3))
    y = hvd.alltoall(x, process_set=hvd.global_process_set)
    assert torch.is_tensor(y) and y.grad_fn is not None
    close(y, torch.cat([data(q, (2 * s, 3))[2 * r:2 * r + 2] for q in range(s)]))
    y.backward(grad(r, (2 * s, 3)))
    close(x.grad, torch.cat([grad(p, (2 * s, 3))[2 * r:2 * r + 2] for p in range(s)]))


# ---- reducescatter ------------------------------------------------------------------


def reducescatter_reference(r, s, d0, op, pre, post, seed=0):
    """(output, input gradient). Horovod's gradient: the allgather of the
    output gradients times pre * post, times size() for Sum (not divided for
    Average)."""
    offset, rows = rows_of(r, d0, s)
    out = reduced([data(q, (d0, 2), seed)[offset:offset + rows] for q in range(s)], op, pre, post)
    scale = (s if op == hvd.Sum else 1) * pre * post
    gathered = torch.cat([grad(q, (rows_of(q, d0, s)[1], 2), seed) for q in range(s)])
    return out, gathered * scale


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
@pytest.mark.parametrize("pre,post", SCALES)
def test_reducescatter_gradient_is_the_scaled_allgather_of_the_gradient(op, pre, post):
    r, s = r_s()
    d0 = 2 * s + 1  # uneven: the first rank gets one row more
    x = leaf(r, (d0, 2))
    y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
    want_y, want_grad = reducescatter_reference(r, s, d0, op, pre, post)
    close(y, want_y)
    y.backward(grad(r, tuple(y.shape)))
    close(x.grad, want_grad)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average], ids=["sum", "average"])
def test_grouped_reducescatter_gradients(op):
    r, s = r_s()
    d0s = [2 * s + 1, s]
    xs = [leaf(r, (d0, 2), seed=i) for i, d0 in enumerate(d0s)]
    ys = hvd.grouped_reducescatter(xs, op=op, prescale_factor=2.0, postscale_factor=0.5)
    assert all(y.grad_fn is not None for y in ys)
    torch.autograd.backward(ys, [grad(r, tuple(y.shape), seed=i) for i, y in enumerate(ys)])
    for i, (x, y, d0) in enumerate(zip(xs, ys, d0s)):
        want_y, want_grad = reducescatter_reference(r, s, d0, op, 2.0, 0.5, seed=i)
        close(y, want_y)
        close(x.grad, want_grad)


# ---- no graph when none is wanted ----------------------------------------------------


def test_results_have_no_graph_without_grad():
    r, s = r_s()
    x = leaf(r, (s, 2))
    with torch.no_grad():
        outs = [hvd.allreduce(x), hvd.allgather(x), hvd.broadcast(x, 0), hvd.alltoall(x),
                hvd.reducescatter(x)] + hvd.grouped_allreduce([x]) + hvd.grouped_allgather([x])
    outs += [hvd.allgather(data(r, (s, 2))), hvd.allreduce(torch.ones(2, dtype=torch.int32))]
    assert all(not o.requires_grad and o.grad_fn is None for o in outs)
    close(outs[0], sum(data(q, (s, 2)) for q in range(s)) / s)

"""allreduce, grouped_allreduce, reducescatter and grouped_reducescatter on
tf.Tensor, tf.Variable and tf.IndexedSlices (Horovod's horovod/tensorflow/
__init__.py, 0.28.1): compression, the average= shim, sparse gradients.

An IndexedSlices is reduced as Horovod does: its values and its indices are
allgathered (the dense result is the sum of the slices; values divided by the
set's size for Average), Sum and Average only, no scale factors. Dense
tensors of a grouped_allreduce are grouped by dtype (one grouped op per
dtype; Horovod requires one dtype). device_dense/device_sparse are accepted
as Horovod's and used as tf.device scopes; the ops have CPU kernels only.
"""

import warnings

import tensorflow as tf

from tutti import process_sets as _process_sets
from tutti.process_sets import global_process_set
from tutti.tensorflow import mpi_ops
from tutti.tensorflow.compression import Compression, resolve
from tutti.tensorflow.mpi_ops import Adasum, Average, Max, Min, Product, Sum

_OPS = (Sum, Average, Min, Max, Product, Adasum)


def _op_code(op, average):
    """Horovod's handle_average_backwards_compatibility: op (default Average),
    or average=True/False (deprecated), not both."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    if op is None:
        return Average
    if op not in _OPS:
        raise ValueError("op=%r: expected Sum, Average, Min, Max, Product or Adasum" % (op,))
    return op


def _with_compression(compression, tensors, reduce):
    """(spec or None, reduce(spec, tensors) decompressed): a Python-side
    compressor compresses each tensor before `reduce` and decompresses after."""
    spec, python_side = resolve(compression)
    if python_side is None:
        return reduce(spec, list(tensors))
    pairs = [python_side.compress(t) for t in tensors]
    outs = reduce(spec, [p[0] for p in pairs])
    return [python_side.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def _check_adasum(op, process_set):
    """As Horovod's: Adasum on a number of ranks that is not a power of two
    raises NotImplementedError before anything is enqueued."""
    if op != Adasum:
        return
    n = _process_sets.set_size(process_set)
    if n & (n - 1):
        raise NotImplementedError(
            "Running Adasum with non-power of 2 ranks is not supported yet. (%d ranks; Adasum "
            "runs on 1, 2, 4, 8, ... ranks)" % n)


def _check_sparse(op, prescale_factor, postscale_factor):
    if op == Adasum:
        raise NotImplementedError(
            "The Adasum reduction does not currently support sparse tensors. As a workaround "
            "please pass sparse_as_dense=True to DistributedOptimizer")
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def _sparse_result(slices, values, indices, op, process_set):
    if op == Average:
        values = values / tf.cast(_process_sets.set_size(process_set), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """postscale * op(prescale * tensor) over the ranks of the set; same shape
    and dtype on every rank. op: Sum, Average (default), Min, Max, Product,
    Adasum (float16/32/64, 2^k ranks). compression: see
    tutti.tensorflow.compression. A tf.IndexedSlices is allgathered (see the
    module's docstring). Errors: see tutti.tensorflow.mpi_ops."""
    op = _op_code(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = mpi_ops.allgather(tensor.values, process_set=process_set,
                                       ignore_name_scope=ignore_name_scope)
            indices = mpi_ops.allgather(tensor.indices, process_set=process_set,
                                        ignore_name_scope=ignore_name_scope)
            return _sparse_result(tensor, values, indices, op, process_set)
    _check_adasum(op, process_set)
    with tf.device(device_dense):
        return _with_compression(compression, [tensor], lambda spec, ts: [mpi_ops._allreduce(
            ts[0], name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
            process_set=process_set, compression=spec)])[0]


def _grouped_dense(spec, tensors, name, op, prescale_factor, postscale_factor, process_set,
                   ignore_name_scope):
    """One grouped allreduce per dtype of `tensors`; results in input order."""
    by_dtype = {}
    for i, t in enumerate(tensors):
        t = tf.convert_to_tensor(t)
        by_dtype.setdefault(t.dtype, []).append((i, t))
    results = [None] * len(tensors)
    for k, members in enumerate(by_dtype.values()):
        group_name = name if name is None or len(by_dtype) == 1 else "%s_%d" % (name, k)
        reduced = mpi_ops._grouped_allreduce(
            [t for _, t in members], name=group_name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
            process_set=process_set, compression=spec)
        for (i, _), r in zip(members, reduced):
            results[i] = r
    return results


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """allreduce of every tensor of `tensors` as one group (fused together);
    IndexedSlices among them are allgathered. Returns a list in input order."""
    if not tensors:
        return tensors
    op = _op_code(op, average)
    sparse = [(i, t) for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [(i, t) for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    results = [None] * len(tensors)
    if sparse:
        _check_sparse(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            slices = [t for _, t in sparse]
            values = _grouped_allgather_any([s.values for s in slices], process_set,
                                            ignore_name_scope)
            indices = _grouped_allgather_any([s.indices for s in slices], process_set,
                                             ignore_name_scope)
            for (i, s), v, ix in zip(sparse, values, indices):
                results[i] = _sparse_result(s, v, ix, op, process_set)
    if dense:
        _check_adasum(op, process_set)
        with tf.device(device_dense):
            reduced = _with_compression(
                compression, [t for _, t in dense],
                lambda spec, ts: _grouped_dense(spec, ts, name, op, prescale_factor,
                                                postscale_factor, process_set, ignore_name_scope))
        for (i, _), r in zip(dense, reduced):
            results[i] = r
    return results


def _grouped_allgather_any(tensors, process_set, ignore_name_scope):
    """grouped_allgather per dtype (values of several dtypes), in input order."""
    by_dtype = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    out = [None] * len(tensors)
    for indices in by_dtype.values():
        gathered = mpi_ops.grouped_allgather([tensors[i] for i in indices],
                                             process_set=process_set,
                                             ignore_name_scope=ignore_name_scope)
        for i, g in zip(indices, gathered):
            out[i] = g
    return out


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` (same shape on every rank, rank >= 1) over the set and
    returns this rank's rows: d0 // n, one more on the first d0 % n ranks.
    op: Sum or Average (default), Min, Max, Product."""
    # tutti compresses allreduces only: a spec is ignored, a Python compressor applies.
    with tf.device(device_dense):
        return _with_compression(compression, [tensor], lambda _, ts: [mpi_ops._reducescatter(
            ts[0], name=name, op=op, process_set=process_set,
            ignore_name_scope=ignore_name_scope, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor)])[0]


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of each tensor of `tensors` (one dtype) in one op."""
    if not tensors:
        return tensors
    with tf.device(device_dense):
        return _with_compression(compression, tensors, lambda _, ts: mpi_ops._grouped_reducescatter(
            ts, op=op, process_set=process_set, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor))

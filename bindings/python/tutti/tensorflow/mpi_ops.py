"""tutti's collectives as TensorFlow ops, with their gradients (Horovod's
horovod/tensorflow/mpi_ops.py, 0.28.1).

The ops are asynchronous kernels of libtutti_tensorflow.so (AsyncOpKernel):
the kernel enqueues the tensor with tutti and returns; tutti's background
thread completes it (fusion, the response cache, compression and the timeline
apply as for every tutti op). They run eagerly and inside tf.function.
Tensors: host (CPU) tensors of uint8, uint16, uint32, uint64, int8, int16,
int32, int64, float16, bfloat16, float32, float64, bool, any shape (allgather, alltoall and
reducescatter need rank >= 1).

Names: ops are matched across ranks by name. In a graph (tf.function) the
name is the node's name, by default derived from the input tensor's name as
Horovod's ("TuttiAllreduce_<tensor name>"), the same on every rank that built
the same graph; ignore_name_scope=True drops the enclosing name scopes.
Eagerly every op of a kind has the same name and ops run one at a time, in
program order: every rank must issue them in the same order.

Errors are TensorFlow errors, with tutti's message: a shape or dtype that
differs across ranks is tf.errors.FailedPreconditionError on every rank,
naming the tensor (as Horovod's); a process set that is not registered
ValueError when the op is built (eagerly or while tracing, as Horovod's);
a bad argument InvalidArgumentError; a lost
peer UnavailableError within TUTTI_TIMEOUT_SECONDS; a shutdown AbortedError;
a stall DeadlineExceededError; not initialised FailedPreconditionError.
Inside a tf.function TensorFlow reports the UnavailableError and
AbortedError of ops that are not its own communication ops as
InternalError, whose message keeps tutti's and says "originally returned
UnavailableError".

Gradients (as Horovod's): allreduce -> the same allreduce of the gradient;
allgather -> the Average-allreduce of the gradient, then this rank's rows;
broadcast -> the Average-allreduce on the root, zeros elsewhere; alltoall ->
the alltoall of the gradient back with the received splits; reducescatter ->
the allgather of the gradient times size() for Sum, times the pre- and
postscale factors. Horovod's conventions are kept: the allgather gradient is
1/size() of the exact derivative of the sum over ranks, the reducescatter one
size() times it.
"""

import re

import tensorflow as tf
from tensorflow.python.framework import ops as _tf_ops

from tutti import process_sets as _process_sets
from tutti.basics import rank
from tutti.process_sets import global_process_set
from tutti.tensorflow import _loader

TUTTI_LIB = _loader.load()

# Reduce ops (values are tutti_reduce_op), Horovod's names.
Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4
Adasum = 5


def _normalize_name(name):
    """Normalizes an op name to TensorFlow's rules, as Horovod's."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _executing_eagerly():
    return tf.executing_eagerly()


def _default_name(prefix, tensors):
    """Horovod's graph-mode name; None eagerly (the kernel's name is used) and
    for an eager tensor captured by a graph, which has no name (TensorFlow
    then numbers the nodes <prefix>, <prefix>_1, ... in graph order)."""
    if _executing_eagerly():
        return None
    try:
        names = [t.name for t in tensors]
    except AttributeError:
        return None
    return _normalize_name("%s_%s" % (prefix, "_".join(names)))


def _set_id(process_set):
    """The set's id, checked when the op is built, as Horovod's: ValueError for
    anything but a registered set (never added, removed, from before a shutdown,
    or a process_set_id set by hand that no registered set of these ranks has).
    A plain ValueError: autograph re-raises only built-in classes as they are,
    so that tf.function's tracing raises ValueError too."""
    try:
        ps_id = _process_sets.process_set_id(process_set)
    except ValueError as e:
        raise ValueError(str(e)) from None
    if ps_id == 0:
        return 0
    try:
        registered = _process_sets.process_set_by_id(ps_id)
    except ValueError:
        registered = None
    if registered is None or list(registered.ranks) != list(process_set.ranks):
        known = [ps.process_set_id for ps in _process_sets.process_sets()]
        raise ValueError(
            "process_set %s has process_set_id %d, which is not the id of a registered set of "
            "these ranks (registered ids: %s); pass a set from hvd.add_process_set() or "
            "init(process_sets=[...])" % (process_set, ps_id, known))
    return ps_id


def _set_of(process_set_id):
    return _process_sets.process_set_by_id(process_set_id) if process_set_id else global_process_set


def _spec(compression):
    """The compression attr: '' = the job's default."""
    return "" if compression is None else compression


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set, compression=None):
    """Allreduce op of `tensor` (same shape and dtype on every rank of the set).
    compression: a tutti spec string ("fp16", "topk:0.01", ...) or None."""
    if name is None:
        name = _default_name("TuttiAllreduce", [tensor])
    return TUTTI_LIB.tutti_allreduce(
        tensor, name=name, reduce_op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set), compression=_spec(compression))


@_tf_ops.RegisterGradient("TuttiAllreduce")
def _allreduce_grad(op, grad):
    return _allreduce(grad, op=op.get_attr("reduce_op"),
                      prescale_factor=op.get_attr("prescale_factor"),
                      postscale_factor=op.get_attr("postscale_factor"),
                      ignore_name_scope=op.get_attr("ignore_name_scope"),
                      process_set=_set_of(op.get_attr("process_set_id")),
                      compression=op.get_attr("compression").decode() or None)


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set, compression=None):
    """One grouped allreduce op of `tensors` (one dtype); fused as one group."""
    if name is None:
        name = _default_name("TuttiGroupedAllreduce", [tensors[0], tensors[-1]])
    return TUTTI_LIB.tutti_grouped_allreduce(
        list(tensors), name=name, reduce_op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set), compression=_spec(compression))


@_tf_ops.RegisterGradient("TuttiGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(list(grads), op=op.get_attr("reduce_op"),
                              prescale_factor=op.get_attr("prescale_factor"),
                              postscale_factor=op.get_attr("postscale_factor"),
                              ignore_name_scope=op.get_attr("ignore_name_scope"),
                              process_set=_set_of(op.get_attr("process_set_id")),
                              compression=op.get_attr("compression").decode() or None)


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates `tensor` of every rank of the set along the first dimension,
    in rank order. The first dimension may differ per rank, the others must match."""
    if name is None:
        name = _default_name("TuttiAllgather", [tensor])
    return TUTTI_LIB.tutti_allgather(tensor, name=name, ignore_name_scope=ignore_name_scope,
                                     process_set_id=_set_id(process_set))


def _split_for_rank(grad, x, ignore_name_scope, ps):
    """This rank's rows of an allgathered gradient (x: the op's input)."""
    with tf.device("/cpu:0"):
        d = tf.reshape(tf.shape(x)[0], [1])
        d = tf.reshape(allgather(d, ignore_name_scope=ignore_name_scope, process_set=ps),
                       [ps.size()])
    return tf.split(grad, num_or_size_splits=d, axis=0)[ps.rank()]


@_tf_ops.RegisterGradient("TuttiAllgather")
def _allgather_grad(op, grad):
    ignore = op.get_attr("ignore_name_scope")
    ps = _set_of(op.get_attr("process_set_id"))
    grad = _allreduce(grad, op=Average, ignore_name_scope=ignore, process_set=ps)
    return _split_for_rank(grad, op.inputs[0], ignore, ps)


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """allgather of each of `tensors` (one dtype) in one op."""
    if name is None:
        name = _default_name("TuttiGroupedAllgather", [tensors[0], tensors[-1]])
    return TUTTI_LIB.tutti_grouped_allgather(list(tensors), name=name,
                                             ignore_name_scope=ignore_name_scope,
                                             process_set_id=_set_id(process_set))


@_tf_ops.RegisterGradient("TuttiGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    ignore = op.get_attr("ignore_name_scope")
    ps = _set_of(op.get_attr("process_set_id"))
    grads = [_allreduce(g, op=Average, ignore_name_scope=ignore, process_set=ps) for g in grads]
    return [_split_for_rank(g, x, ignore, ps) for g, x in zip(grads, op.inputs)]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """`tensor` of global rank root_rank (a member of the set) on every rank of the set."""
    if name is None:
        name = _default_name("TuttiBroadcast", [tensor])
    return TUTTI_LIB.tutti_broadcast(tensor, name=name, root_rank=root_rank,
                                     ignore_name_scope=ignore_name_scope,
                                     process_set_id=_set_id(process_set))


@_tf_ops.RegisterGradient("TuttiBroadcast")
def _broadcast_grad(op, grad):
    root_rank = op.get_attr("root_rank")
    reduced = _allreduce(grad, op=Average, ignore_name_scope=op.get_attr("ignore_name_scope"),
                         process_set=_set_of(op.get_attr("process_set_id")))
    return reduced if rank() == root_rank else reduced * 0


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends splits[p] rows of `tensor` to rank p of the set (splits None: an even
    split of the first dimension) and returns the rows received, in rank order;
    with splits given, returns (output, received_splits), as Horovod's."""
    splits_ = (tf.convert_to_tensor(splits, dtype=tf.int32) if splits is not None
               else tf.constant([], dtype=tf.int32))
    if name is None:
        name = _default_name("TuttiAlltoall", [tensor])
    output, rsplits = TUTTI_LIB.tutti_alltoall(tensor, splits=splits_, name=name,
                                               ignore_name_scope=ignore_name_scope,
                                               process_set_id=_set_id(process_set))
    return (output, rsplits) if splits is not None else output


@_tf_ops.RegisterGradient("TuttiAlltoall")
def _alltoall_grad(op, grad_wrt_output, grad_wrt_received_splits):
    del grad_wrt_received_splits  # integer output: no gradient
    grad, _ = alltoall(grad_wrt_output, splits=op.outputs[1],
                       ignore_name_scope=op.get_attr("ignore_name_scope"),
                       process_set=_set_of(op.get_attr("process_set_id")))
    return [grad, None]


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False,
                   process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set and returns this rank's rows of the result:
    rows d0 // n, plus one for the first d0 % n ranks of the set."""
    if name is None:
        name = _default_name("TuttiReducescatter", [tensor])
    return TUTTI_LIB.tutti_reducescatter(
        tensor, name=name, reduce_op=op, ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set), prescale_factor=prescale_factor,
        postscale_factor=postscale_factor)


def _reducescatter_grad_scale(op, grad, ps):
    if op.get_attr("reduce_op") == Sum:
        grad *= ps.size()
    if op.get_attr("prescale_factor") != 1.0:
        grad *= op.get_attr("prescale_factor")
    if op.get_attr("postscale_factor") != 1.0:
        grad *= op.get_attr("postscale_factor")
    return grad


@_tf_ops.RegisterGradient("TuttiReducescatter")
def _reducescatter_grad(op, grad):
    ps = _set_of(op.get_attr("process_set_id"))
    return allgather(_reducescatter_grad_scale(op, grad, ps),
                     ignore_name_scope=op.get_attr("ignore_name_scope"), process_set=ps)


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False,
                           process_set=global_process_set, prescale_factor=1.0,
                           postscale_factor=1.0):
    """reducescatter of each of `tensors` (one dtype) in one op."""
    if name is None:
        name = _default_name("TuttiGroupedReducescatter", [tensors[0], tensors[-1]])
    return TUTTI_LIB.tutti_grouped_reducescatter(
        list(tensors), name=name, reduce_op=op, ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set), prescale_factor=prescale_factor,
        postscale_factor=postscale_factor)


@_tf_ops.RegisterGradient("TuttiGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    ps = _set_of(op.get_attr("process_set_id"))
    return [allgather(_reducescatter_grad_scale(op, g, ps),
                      ignore_name_scope=op.get_attr("ignore_name_scope"), process_set=ps)
            for g in grads]


def join():
    """This rank has no more data: it joins the other ranks' allreduces with
    zeros until every rank joined. Returns the last rank to join (int32 scalar)."""
    return TUTTI_LIB.tutti_join()


def barrier(process_set=global_process_set):
    """Returns once every rank of the set entered the barrier (an op in a graph)."""
    return TUTTI_LIB.tutti_barrier(process_set_id=_set_id(process_set))


def size_op(process_set_id=0, name=None):
    """int32 scalar op: the number of ranks (of the set) when the graph runs."""
    return TUTTI_LIB.tutti_size(process_set_id=process_set_id, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """int32 scalar op: 1 when this rank is in the set, else 0."""
    return TUTTI_LIB.tutti_process_set_included(process_set_id=process_set_id, name=name)


def local_size_op(name=None):
    """int32 scalar op: the number of ranks on this host."""
    return TUTTI_LIB.tutti_local_size(name=name)


def rank_op(name=None):
    """int32 scalar op: this process's rank."""
    return TUTTI_LIB.tutti_rank(name=name)


def local_rank_op(name=None):
    """int32 scalar op: this process's rank on its host."""
    return TUTTI_LIB.tutti_local_rank(name=name)


for _op in ("TuttiSize", "TuttiProcessSetIncluded", "TuttiLocalSize", "TuttiRank",
            "TuttiLocalRank", "TuttiJoin", "TuttiBarrier"):
    _tf_ops.NotDifferentiable(_op)

"""broadcast_variables, broadcast_object and allgather_object (Horovod's
horovod/tensorflow/functions.py, 0.28.1).

broadcast_variables runs the broadcasts of all variables in one tf.function
when called eagerly (they are negotiated and fused together), and returns an
op grouping the assignments inside a graph. The object functions pickle
(Python's pickle; Horovod uses cloudpickle) and run eagerly only, as
Horovod's do without a TF1 session.

Thread-safety: as the collectives: every rank of the set calls them in the
same order.
"""

import pickle

import numpy as np
import tensorflow as tf

from tutti import basics as _basics
from tutti.errors import InvalidArgumentError
from tutti.process_sets import global_process_set
from tutti.tensorflow import mpi_ops


def _assign_broadcasts(variables, root_rank, process_set):
    return [var.assign(mpi_ops.broadcast(tf.convert_to_tensor(var), root_rank,
                                         process_set=process_set))
            for var in variables]


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns root_rank's values of `variables` (tf.Variable or Keras
    variables; same shapes and dtypes on every rank, in the same order) to
    every rank's. inplace is accepted as Horovod's (TF >= 2.6) and gives the
    same result. Returns None eagerly, an op grouping the assignments in a graph."""
    del inplace
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    if tf.executing_eagerly():
        tf.function(lambda: _assign_broadcasts(variables, root_rank, process_set) and None)()
        return None
    return tf.group(*_assign_broadcasts(variables, root_rank, process_set))


def _require_eager(fn):
    if not tf.executing_eagerly():
        raise NotImplementedError(
            "%s runs eagerly only (it returns Python objects); call it outside tf.function"
            % fn)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` (pickled) on every rank of the set. session
    (TF1) is not supported: None only. An object the root cannot pickle
    raises InvalidArgumentError on every rank."""
    del name  # eager ops are matched by order; accepted as Horovod's
    _require_eager("broadcast_object")
    if session is not None:
        raise NotImplementedError("broadcast_object(session=...): TF1 sessions are not supported")
    is_root = _basics.rank() == root_rank
    payload, error = b"", None
    if is_root:
        try:
            payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # pickling can raise anything
            error = e
    length = -1 if error is not None else len(payload)
    length = int(mpi_ops.broadcast(tf.constant([length], tf.int64), root_rank,
                                   process_set=process_set).numpy()[0])
    if length < 0:
        raise InvalidArgumentError("broadcast_object: rank %d could not pickle the object: %s"
                                   % (root_rank, error if error else "see that rank"), 1)
    data = np.frombuffer(payload, np.uint8) if is_root else np.zeros(length, np.uint8)
    data = mpi_ops.broadcast(tf.constant(data), root_rank, process_set=process_set)
    return obj if is_root else pickle.loads(data.numpy().tobytes())


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj` (pickled), in rank order of the
    set. An object a rank cannot pickle raises InvalidArgumentError on every rank."""
    del name
    _require_eager("allgather_object")
    if session is not None:
        raise NotImplementedError("allgather_object(session=...): TF1 sessions are not supported")
    payload, error = b"", None
    try:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # pickling can raise anything
        error = e
    length = -1 if error is not None else len(payload)
    lengths = mpi_ops.allgather(tf.constant([length], tf.int64), process_set=process_set)
    lengths = [int(n) for n in lengths.numpy()]
    bad = [i for i, n in enumerate(lengths) if n < 0]
    if bad:
        raise InvalidArgumentError(
            "allgather_object: rank(s) %s of the set could not pickle their object%s"
            % (bad, ": %s" % error if error else ""), 1)
    data = mpi_ops.allgather(tf.constant(np.frombuffer(payload, np.uint8)),
                             process_set=process_set).numpy().tobytes()
    out, offset = [], 0
    for n in lengths:
        out.append(pickle.loads(data[offset:offset + n]))
        offset += n
    return out

"""broadcast_variables, broadcast_, broadcast_global_variables,
broadcast_object, broadcast_object_fn and allgather_object (Horovod's
horovod/tensorflow/functions.py and mpi_ops.broadcast_, 0.28.1).

broadcast_variables and broadcast_ run the broadcasts of all variables in
one tf.function when called eagerly (they are negotiated and fused
together), and build ops inside a graph. The object functions pickle
(Python's pickle; Horovod uses cloudpickle) and return Python objects:
eagerly they run at once; in a TensorFlow 1 graph (tf.compat.v1) they build
their ops there and run them in `session` or the default session, as
Horovod's. Inside a tf.function they raise NotImplementedError (no Python
objects can come out of a trace).

Thread-safety: as the collectives: every rank of the set calls them in the
same order.
"""

import pickle

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import func_graph as _func_graph
from tensorflow.python.ops.ref_variable import RefVariable

from tutti import basics as _basics
from tutti.errors import InvalidArgumentError
from tutti.process_sets import global_process_set
from tutti.tensorflow import mpi_ops


def _assign_broadcasts(variables, root_rank, process_set, name=None):
    """The assignments of root_rank's values; broadcast names `name`_<i> when given."""
    out = []
    for i, var in enumerate(variables):
        value = mpi_ops.broadcast(tf.convert_to_tensor(var), root_rank,
                                  name=None if name is None else "%s_%d" % (name, i),
                                  process_set=process_set)
        # A Keras variable's assign() takes no read_value.
        out.append(var.assign(value, read_value=False) if isinstance(var, tf.Variable)
                   else var.assign(value))
    return out


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


def _updated_values(variables, root_rank, name, process_set):
    assigns = _assign_broadcasts(variables, root_rank, process_set, name)
    with tf.control_dependencies(assigns):
        return [tf.identity(tf.convert_to_tensor(var)) for var in variables]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Broadcasts root_rank's values of `variables` into every rank's
    variables (Horovod's in-place broadcast) and returns the updated values:
    a list of tensors, one per variable, of its shape and dtype. Resource
    variables (TensorFlow 2's) or reference variables (tf.compat.v1 graphs);
    a mix of both raises ValueError, as Horovod's. tutti assigns the
    broadcast result to the variable (the same values as Horovod's in-place
    kernel, through one temporary buffer per variable). Eagerly all the
    broadcasts run in one tf.function; in a graph the result depends on the
    assignments. name: a prefix for the ops' names (graph mode)."""
    variables = list(variables)
    kinds = {isinstance(var, RefVariable) for var in variables}
    if len(kinds) > 1:
        raise ValueError("All variables passed to broadcast_() should be of the same kind, "
                         "resource or reference; got both")
    if not variables:
        return []
    if tf.executing_eagerly():
        return tf.function(lambda: _updated_values(variables, root_rank, None, process_set))()
    return _updated_values(variables, root_rank, name, process_set)


def broadcast_global_variables(root_rank):
    """An op that broadcasts every global variable of the default TensorFlow 1
    graph (tf.compat.v1.global_variables()) from root_rank. RuntimeError when
    executing eagerly (TensorFlow 2's default), as Horovod's: there, use
    broadcast_variables(model.variables, root_rank)."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution: it broadcasts "
            "the global variables of a TensorFlow 1 graph (tf.compat.v1). Please use "
            "`hvd.broadcast_variables(<model/optimizer variables>, root_rank)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """A TF1 SessionRunHook (tf.compat.v1.train.MonitoredSession and the like)
    that broadcasts every global variable from root_rank once the session is
    created, as Horovod's. device: a tf.device for the broadcast ops."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)


def _fetcher(fn, session):
    """fn(tensor) -> numpy value: .numpy() eagerly, session.run in a TF1 graph."""
    if tf.executing_eagerly():
        return lambda t: t.numpy()
    if isinstance(tf.compat.v1.get_default_graph(), _func_graph.FuncGraph):
        raise NotImplementedError(
            "%s returns Python objects: call it eagerly or in a TensorFlow 1 graph with a "
            "session, not inside tf.function" % fn)
    session = session or tf.compat.v1.get_default_session()
    if session is None:
        raise ValueError("%s in a TensorFlow 1 graph runs its ops in a session: pass session= "
                         "or call it inside `with session.as_default():`" % fn)
    return session.run


def _pickled(obj):
    """(bytes, None) or (b"", the error pickling raised)."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), None
    except Exception as e:  # pickling can raise anything
        return b"", e


def _broadcast_pickled(fn, obj, root_rank, bcast_size, bcast_data):
    """root_rank's obj: bcast_size(int64 [1] array) and bcast_data(uint8 array)
    broadcast the pickle's length (-1: the root could not pickle) and bytes."""
    is_root = _basics.rank() == root_rank
    payload, error = _pickled(obj) if is_root else (b"", None)
    length = -1 if error is not None else len(payload)
    length = int(bcast_size(np.array([length], np.int64))[0])
    if length < 0:
        raise InvalidArgumentError("%s: rank %d could not pickle the object: %s"
                                   % (fn, root_rank, error if error else "see that rank"), 1)
    data = np.frombuffer(payload, np.uint8) if is_root else np.zeros(length, np.uint8)
    data = bcast_data(data)
    return obj if is_root else pickle.loads(data.tobytes())


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` (pickled) on every rank of the set. Eagerly
    session is unused; in a TF1 graph the ops run in session (default: the
    default session; ValueError without one). name: the ops' name prefix in a
    graph (default: the object's type name). An object the root cannot pickle
    raises InvalidArgumentError on every rank."""
    fetch = _fetcher("broadcast_object", session)
    name = name or type(obj).__name__

    def bcast(suffix):
        return lambda a: fetch(mpi_ops.broadcast(tf.constant(a), root_rank, name=name + suffix,
                                                 process_set=process_set))

    return _broadcast_pickled("broadcast_object", obj, root_rank, bcast(".sz"), bcast(".t"))


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """TensorFlow 1 graphs: builds the broadcast ops once (on placeholders)
    and returns fn(obj) -> root_rank's obj, run in `session` (default: the
    default session when fn is called), as Horovod's. RuntimeError eagerly."""
    if tf.executing_eagerly():
        raise RuntimeError("broadcast_object_fn builds TensorFlow 1 graph ops: eagerly, use "
                           "broadcast_object")
    name = name or "broadcast_object_fn"
    size_in = tf.compat.v1.placeholder(tf.int64, [1], name="bcast_object_size")
    size_out = mpi_ops.broadcast(size_in, root_rank, name=name + ".sz", process_set=process_set)
    data_in = tf.compat.v1.placeholder(tf.uint8, [None], name="bcast_object_data")
    data_out = mpi_ops.broadcast(data_in, root_rank, name=name + ".t", process_set=process_set)

    def bcast(obj):
        sess = session or tf.compat.v1.get_default_session()
        if sess is None:
            raise ValueError("broadcast_object_fn's function needs session= or a default session")
        return _broadcast_pickled("broadcast_object_fn", obj, root_rank,
                                  lambda a: sess.run(size_out, feed_dict={size_in: a}),
                                  lambda a: sess.run(data_out, feed_dict={data_in: a}))

    return bcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj` (pickled), in rank order of the
    set. session and name: as broadcast_object's. An object a rank cannot
    pickle raises InvalidArgumentError on every rank."""
    fetch = _fetcher("allgather_object", session)
    name = name or type(obj).__name__
    payload, error = _pickled(obj)
    length = -1 if error is not None else len(payload)
    lengths = fetch(mpi_ops.allgather(tf.constant([length], tf.int64), name=name + ".sz",
                                      process_set=process_set))
    lengths = [int(n) for n in lengths]
    bad = [i for i, n in enumerate(lengths) if n < 0]
    if bad:
        raise InvalidArgumentError(
            "allgather_object: rank(s) %s of the set could not pickle their object%s"
            % (bad, ": %s" % error if error else ""), 1)
    data = fetch(mpi_ops.allgather(tf.constant(np.frombuffer(payload, np.uint8)),
                                   name=name + ".t", process_set=process_set)).tobytes()
    out, offset = [], 0
    for n in lengths:
        out.append(pickle.loads(data[offset:offset + n]))
        offset += n
    return out

"""Elastic training for TensorFlow and Keras (Horovod's
horovod/tensorflow/elastic.py, 0.28.1; docs/elastic.md, docs/tensorflow.md).

    import tutti.tensorflow as hvd
    hvd.init()
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, step=0)

    @hvd.elastic.run
    def train(state):
        ...                      # steps; state.commit() every few steps

    train(state)

As tutti.torch.elastic: run(func) syncs the state and calls func(state);
when a peer is lost it restores the last commit, leaves the membership
generation, joins the next and goes on with the new rank and size; when
hosts are added or removed (seen at a commit) it does the same without
restoring. tutti's TensorFlow ops report a lost peer as a TensorFlow error
(UnavailableError; InternalError saying so inside a tf.function): run()
turns those into tutti's PeerLostError for the loop. After every reset the
cached gradient allreduce functions are dropped and a Keras model's compiled
train function is rebuilt, so that nothing traced at the old size stays.

Thread-safety: one training thread runs func; no other thread may issue
collectives while run() moves to a new generation.
"""

import contextlib
import functools
import warnings

import tensorflow as tf

from tutti import basics as _basics
from tutti import elastic as _elastic
from tutti.elastic import ObjectState, State  # noqa: F401 (Horovod's hvd.elastic names)
from tutti.errors import HostsUpdatedInterrupt, PeerLostError, TuttiIOError, WaitTimeoutError
from tutti.tensorflow import functions as _functions
from tutti.tensorflow import gradient_tape as _gradient_tape


def _is_peer_lost(error):
    if isinstance(error, tf.errors.UnavailableError):
        return True
    return (isinstance(error, tf.errors.InternalError)
            and "originally returned UnavailableError" in str(error))


@contextlib.contextmanager
def peer_lost_as_tutti_error():
    """Re-raises a TensorFlow error of a lost peer as tutti's PeerLostError."""
    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.InternalError) as e:
        if _is_peer_lost(e):
            raise PeerLostError(str(e).strip().splitlines()[0], 3) from e
        raise


class TensorFlowKerasState(ObjectState):
    """The state of a Keras model and its optimizer, plus plain values as
    keyword arguments (epoch=0, ...), as Horovod's TensorFlowKerasState.
    save() keeps host copies of the model's and the optimizer's variables,
    restore() assigns them back, sync() builds the optimizer where it is not
    built yet (a newcomer) and broadcasts every variable from the sync root.
    restore() and sync() also drop a DistributedOptimizer's partial gradient
    sums (backward_passes_per_step > 1): commit on a reduction boundary so
    that none is lost.
    backend is accepted as Horovod's and unused."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        del backend
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._saved_variables = []
        self._save_variables()
        super().__init__(bcast_object=_functions.broadcast_object, get_rank=_basics.rank,
                         allgather_object=_functions.allgather_object, **kwargs)

    def _variables(self):
        variables = list(self.model.variables)
        if self.optimizer is not None:
            variables += list(self.optimizer.variables)
        return variables

    def _save_variables(self):
        self._saved_variables = [(v, tf.identity(tf.convert_to_tensor(v)).numpy())
                                 for v in self._variables()]

    def save(self):
        self._save_variables()
        super().save()

    def _clear_aggregation(self):
        """A DistributedOptimizer's partial sums of backward_passes_per_step >
        1 dropped: every rank starts counting passes from 0 again."""
        aggregator = getattr(self.optimizer, "_tutti_aggregator", None)
        if aggregator is not None:
            aggregator.clear()

    def restore(self):
        for var, value in self._saved_variables:
            var.assign(value)
        self._clear_aggregation()
        super().restore()

    def sync(self):
        self._clear_aggregation()
        with peer_lost_as_tutti_error():
            if self.optimizer is not None and not getattr(self.optimizer, "built", True):
                self.optimizer.build(self.model.trainable_variables)
            root = self.sync_root()
            _functions.broadcast_variables(self._variables(), root_rank=root)
            self._save_variables()
            self._sync_values(root)

    def reset(self):
        _gradient_tape._cache.clear()
        if hasattr(self.model, "train_function"):
            self.model.train_function = None


class TensorFlowState(ObjectState):
    """The state of a list of tf.Variables (variables=) plus plain values,
    as Horovod's TensorFlowState (TensorFlow 2: session must be None)."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise NotImplementedError("TensorFlowState(session=...): TF1 sessions are not "
                                      "supported")
        self.variables = list(variables or [])
        self._saved_variables = [v.numpy() for v in self.variables]
        super().__init__(bcast_object=_functions.broadcast_object, get_rank=_basics.rank,
                         allgather_object=_functions.allgather_object, **kwargs)

    def save(self):
        self._saved_variables = [v.numpy() for v in self.variables]
        super().save()

    def restore(self):
        for var, value in zip(self.variables, self._saved_variables):
            var.assign(value)
        super().restore()

    def sync(self):
        with peer_lost_as_tutti_error():
            root = self.sync_root()
            _functions.broadcast_variables(self.variables, root_rank=root)
            self._saved_variables = [v.numpy() for v in self.variables]
            self._sync_values(root)

    def reset(self):
        _gradient_tape._cache.clear()


def run(func):
    """Decorator: runs func(state, *args, **kwargs) elastically (see the
    module's docstring). Returns func's result; raises what func raises but
    a lost peer (in an elastic job) and HostsUpdatedInterrupt; ShutdownError
    with the driver's message when the job cannot go on."""

    @functools.wraps(func)
    def translated(state, *args, **kwargs):
        with peer_lost_as_tutti_error():
            return func(state, *args, **kwargs)

    return _elastic.run_fn(translated, _reset)


def _reset():
    """Leaves the generation (warning when the report to the driver failed:
    the runtime is shut down all the same) and joins the next one."""
    try:
        _elastic.leave()
    except (WaitTimeoutError, TuttiIOError) as e:
        # stacklevel 1: the warning is about the job, not the caller's line.
        warnings.warn("tutti.elastic: leaving generation: %s; joining the next one anyway" % e,
                      stacklevel=1)
    _elastic.join()


__all__ = ["HostsUpdatedInterrupt", "ObjectState", "State", "TensorFlowKerasState",
           "TensorFlowState", "run"]

"""Elastic training with Keras model.fit (Horovod's
horovod/tensorflow/keras/elastic.py and horovod/_keras/elastic.py, 0.28.1),
on tutti's elastic runtime (tutti.tensorflow.elastic, docs/elastic.md).

    import tutti.tensorflow.keras as hvd
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, initial_epoch=state.epoch, epochs=10, callbacks=[
            hvd.elastic.UpdateBatchStateCallback(state),
            hvd.elastic.UpdateEpochStateCallback(state),
            hvd.elastic.CommitStateCallback(state, batches_per_commit=10)])

    train(state)

KerasState is TensorFlowKerasState (the model's and its optimizer's
variables plus plain values). The callbacks commit the state every
batches_per_commit batches and at every epoch's end, keep state.batch (the
last finished batch of the epoch, 0 after an epoch) and state.epoch (epochs
finished, counted across resets) up to date; Keras calls callbacks in list
order, so put CommitStateCallback after the other two for a commit to hold
the batch and epoch just finished. As Horovod's,
UpdateBatchStateCallback shortens params["steps"] of the first epoch after
a reset by the batches already done: Keras 3 reads it for the progress bar
only, so skipping those batches is the data pipeline's job.

Thread-safety: the callbacks run on model.fit's thread; commits are
collectives (every rank commits after the same batches).
"""

import keras

from tutti.tensorflow.elastic import TensorFlowKerasState, run


class KerasState(TensorFlowKerasState):
    """State of a Keras model, its optimizer (default: the model's compiled
    one) and plain values given as keyword arguments (exposed as attributes)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=None, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits `state` every batches_per_commit batches (>= 1) and at the end
    of every epoch (a collective: same batches on every rank)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError("batches_per_commit must be >= 1, got %r" % (batches_per_commit,))
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # the same on every rank after a reset

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    on_train_batch_end = on_batch_end

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Sets state.batch to the batch just finished, 0 at the end of an epoch;
    with params["steps"] known, the first epoch after a reset counts
    steps - state.batch steps."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params and self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    on_train_batch_end = on_batch_end

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Sets state.epoch at the end of every epoch to the number of epochs
    finished, counted across resets: state.epoch when training began plus the
    epochs this model.fit finished. Keras numbers epochs from initial_epoch,
    so both Horovod's model.fit(epochs=total - state.epoch) and
    model.fit(initial_epoch=state.epoch, epochs=total) count right."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch
        self._first_epoch = None  # Keras's index of this fit's first epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch
        self._first_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._first_epoch is None:
            self._first_epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        first = self._first_epoch if self._first_epoch is not None else 0
        self.state.epoch = self.initial_epoch + (epoch - first) + 1


__all__ = ["CommitStateCallback", "KerasState", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]

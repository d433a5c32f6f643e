"""Keras 3 callbacks for tutti (Horovod's horovod/tensorflow/keras/callbacks.py
and horovod/_keras/callbacks.py, 0.28.1).

- BroadcastGlobalVariablesCallback: after the first batch, root_rank's model
  and optimizer variables on every rank (the optimizer's exist once it took
  a step), so that every rank trains the same model.
- MetricAverageCallback: at each epoch's end, every metric in logs averaged
  over the ranks (sorted by name: the same order everywhere). Put it before
  callbacks that read the metrics.
- LearningRateScheduleCallback: lr = initial_lr * multiplier(epoch) from
  start_epoch to end_epoch (per epoch with staircase, else per batch with a
  fractional epoch), with momentum correction.
- LearningRateWarmupCallback: lr from initial_lr / size() to initial_lr over
  warmup_epochs (Goyal et al.), per batch.
- BestModelCheckpoint: keras.callbacks.ModelCheckpoint with
  save_best_only=True, saving on rank 0 only.

Momentum correction multiplies the optimizer's momentum by new_lr / old_lr
for one batch, as Horovod's; Keras 3 optimizers keep momentum as a Python
float that a compiled train step has already read, so the correction only
applies where momentum is a variable (warned once otherwise).
"""

import warnings

import keras
import numpy as np

from tutti import basics as _basics
from tutti.tensorflow import collectives as _collectives
from tutti.tensorflow import functions as _functions


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts the model's and its optimizer's variables from root_rank
    once, at the end of the first batch. local_variables: variables left out."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        self._local_vars = {id(v) for v in local_variables}

    def register_local_var(self, var):
        """Leaves `var` out of the broadcast."""
        self._local_vars.add(id(var))

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        variables = [v for v in self.model.variables if id(v) not in self._local_vars]
        _functions.broadcast_variables(variables, root_rank=self.root_rank)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            _functions.broadcast_variables(list(optimizer.variables), root_rank=self.root_rank)
        self.broadcast_done = True

    on_train_batch_end = on_batch_end


class MetricAverageCallback(keras.callbacks.Callback):
    """Averages the metrics in logs over the ranks at the end of every epoch."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        for metric, value in sorted(logs.items()):
            if isinstance(value, (int, float, np.floating, np.integer)) or hasattr(value, "numpy"):
                averaged = _collectives.allreduce(np.asarray(value, dtype=np.float64))
                logs[metric] = float(averaged.numpy())


def _get(variable_or_value):
    return float(keras.ops.convert_to_numpy(variable_or_value))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) in [start_epoch,
    end_epoch). multiplier: a constant (lr * multiplier ** (epoch - start_epoch))
    or a function of the epoch (an int with staircase, else epoch + batch /
    steps_per_epoch; steps_per_epoch is taken from model.fit's params)."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.restore_momentum = None
        self._warned = False
        if not callable(multiplier):
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)
        else:
            self.multiplier = multiplier

    def _autodetect_steps_per_epoch(self):
        if self.params.get("steps"):
            return self.params["steps"]
        raise ValueError("Could not autodetect the number of steps per epoch. Please specify the "
                         "steps_per_epoch parameter to the %s()" % self.__class__.__name__)

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = _get(optimizer.learning_rate)
        new_lr = self.initial_lr * self.multiplier(epoch)
        optimizer.learning_rate = new_lr
        momentum = getattr(optimizer, "momentum", None)
        if not self.momentum_correction or momentum is None or not old_lr:
            return
        if hasattr(momentum, "assign"):
            self.restore_momentum = _get(momentum)
            momentum.assign(self.restore_momentum * new_lr / old_lr)
        elif not self._warned:
            self._warned = True
            warnings.warn("%s: momentum correction skipped: %s keeps momentum as a Python float "
                          "that the compiled train step has read already"
                          % (self.__class__.__name__, type(optimizer).__name__), stacklevel=1)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            self.model.optimizer.momentum.assign(self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if (self.current_epoch < self.start_epoch
                or (self.end_epoch is not None and self.current_epoch >= self.end_epoch)):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    on_train_batch_begin = on_batch_begin
    on_train_batch_end = on_batch_end

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _get(self.model.optimizer.learning_rate)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """lr' = initial_lr / size * ((size - 1) / warmup_epochs * epoch + 1), from
    initial_lr / size() at the start to initial_lr after warmup_epochs."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Round numbers at each epoch's end, as Horovod's.
            epoch += 1.0 / self.steps_per_epoch
            n = _basics.size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _basics.rank() == 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, _get(self.model.optimizer.learning_rate)))


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """ModelCheckpoint of the best model (save_best_only) to filepath, written
    by rank 0 only (Horovod's takes its path from the Spark estimator; here it
    is an argument). Put it after MetricAverageCallback to judge averaged metrics."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_weights_only=False,
                 mode="auto", save_freq="epoch"):
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=save_weights_only, mode=mode,
                         save_freq=save_freq)

    def _save_model(self, *args, **kwargs):
        if _basics.rank() == 0:
            return super()._save_model(*args, **kwargs)
        return None

"""tutti.tensorflow.keras.elastic: KerasState and its callbacks in model.fit
under hvd.elastic.run (a job that is not elastic: run() syncs the state and
trains; the commits snapshot it). The kill-and-resume path is
tensorflow_keras_elastic_kill's (keras_elastic_worker.py)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tutti.keras as hvd_keras
import tutti.tensorflow as hvd
import tutti.tensorflow.keras as hvd_tf_keras


def weights_of(model):
    return [keras.ops.convert_to_numpy(v).copy() for v in model.weights]


class CountCommits(hvd_tf_keras.elastic.KerasState):
    def __init__(self, *args, **kwargs):
        self.commit_points = []
        super().__init__(*args, **kwargs)

    def commit(self):
        self.commit_points.append((self.epoch, self.batch))
        super().commit()


def test_keras_state_and_callbacks_in_model_fit():
    assert hvd_keras.elastic.KerasState is hvd_tf_keras.elastic.KerasState
    r = hvd.rank()
    keras.utils.set_random_seed(100 + r)  # different weights per rank: the sync fixes them
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                  loss="mse")
    rng = np.random.default_rng(r)
    x, y = rng.normal(size=(20, 3)), rng.normal(size=(20, 1))  # 5 batches of 4
    state = CountCommits(model, batch=0, epoch=0)
    seen = []

    @hvd_tf_keras.elastic.run
    def train(state):
        seen.append(weights_of(model))  # after the sync
        model.fit(x, y, batch_size=4, epochs=2, initial_epoch=state.epoch, verbose=0,
                  shuffle=False, callbacks=[
                      hvd_keras.elastic.UpdateBatchStateCallback(state),
                      hvd_keras.elastic.UpdateEpochStateCallback(state),
                      hvd_keras.elastic.CommitStateCallback(state, batches_per_commit=2)])

    train(state)
    for w in seen[0]:
        everyone = hvd.allgather(tf.constant(w[None])).numpy()
        for k in range(hvd.size()):
            np.testing.assert_array_equal(everyone[k], w)  # rank 0's weights everywhere
    assert state.epoch == 2 and state.batch == 0
    # every 2nd batch counted across epochs (as Horovod's; batch = the index just
    # finished) and at each epoch's end (epoch = epochs finished, batch 0)
    assert state.commit_points == [(0, 1), (0, 3), (1, 0), (1, 0), (1, 2), (1, 4), (2, 0)]
    committed = weights_of(model)
    for v in model.weights:
        v.assign(v + 1.0)
    state.restore()
    for w, c in zip(weights_of(model), committed):
        np.testing.assert_array_equal(w, c)


@pytest.mark.parametrize("initial_epoch", [False, True])
def test_epoch_state_counts_across_restarts(initial_epoch):
    """state.epoch = epochs finished in every fit so far, whether the fit
    numbers its epochs from 0 (Horovod's epochs=total - state.epoch) or from
    initial_epoch=state.epoch."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                  loss="mse")
    state = hvd_keras.elastic.KerasState(model, epoch=0, batch=0)
    callback = hvd_keras.elastic.UpdateEpochStateCallback(state)
    x = np.ones((4, 1))
    for finished in (2, 5):  # a first fit of 2 epochs, then one "after a reset" to 5
        if initial_epoch:
            model.fit(x, x, initial_epoch=state.epoch, epochs=finished, verbose=0,
                      callbacks=[callback])
        else:
            model.fit(x, x, epochs=finished - state.epoch, verbose=0, callbacks=[callback])
        assert state.epoch == finished


def test_restore_drops_partial_aggregation():
    """backward_passes_per_step=2: a restore between the two passes drops the
    first pass's sum, so the next reduction holds the two passes after it."""
    n = hvd.size()
    w0 = np.array([[1.0], [2.0]], np.float32)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False)])
    model.layers[0].kernel.assign(w0)
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=2)
    state = hvd_keras.elastic.KerasState(model, opt, step=0)
    state.sync()  # builds the optimizer
    kernel = model.layers[0].kernel

    def grad(scale):  # this rank's gradient: scale * (rank + 1)
        opt.apply([tf.fill((2, 1), scale * (hvd.rank() + 1.0))], [kernel])

    grad(100.0)  # summed locally, then dropped by the restore
    state.restore()
    grad(1.0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(kernel), w0)
    grad(1.0)
    mean = sum(k + 1.0 for k in range(n)) / n
    np.testing.assert_allclose(keras.ops.convert_to_numpy(kernel), w0 - 2.0 * mean, rtol=1e-6)


def test_commit_callback_refuses_zero_batches():
    with pytest.raises(ValueError, match="batches_per_commit"):
        hvd_tf_keras.elastic.CommitStateCallback(None, batches_per_commit=0)

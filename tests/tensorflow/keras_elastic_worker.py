"""One worker of run_tf_tests.py keras-elastic-kill: model.fit with a
DistributedOptimizer under @hvd.elastic.run with a KerasState and the
elastic callbacks (tutti.tensorflow.keras.elastic), printing the lines
tests/python/elastic_example_jobs.py reads:

    commit: generation G rank R size N epoch E batch B step S
    step-time: generation G rank R size N step S time T
    rank R: parameter checksum D (sum X)                      (at the end)

An epoch is STEPS_PER_EPOCH batches and the state is committed at each
epoch's end, so a resumed model.fit (initial_epoch=state.epoch) starts
right after the last commit; the batches come from a generator that starts
at state.step, so the data of a step does not depend on the restarts. A
worker whose state does not end at epoch EPOCHS, step EPOCHS *
STEPS_PER_EPOCH exits 1.
"""

import sys
import time

import keras
from elastic_worker import checksum, data_and_model, where  # this folder: sys.path[0]

import tutti.tensorflow.keras as hvd

EPOCHS, STEPS_PER_EPOCH, BATCH = 24, 5, 16


class PrintedState(hvd.elastic.KerasState):
    def commit(self):
        super().commit()
        print("commit: %s epoch %d batch %d step %d" % (where(), self.epoch, self.batch,
                                                        self.step), flush=True)


class CountSteps(keras.callbacks.Callback):
    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        self.state.step += 1
        print("step-time: %s step %d time %.6f" % (where(), self.state.step, time.time()),
              flush=True)
        time.sleep(0.02)


def batches(x, y, first_step):
    step = first_step
    while True:
        start = (step * hvd.size() + hvd.rank()) * BATCH % len(x)
        yield x[start:start + BATCH], y[start:start + BATCH]
        step += 1


def main():
    hvd.init()
    x, y, model = data_and_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse",
                  jit_compile=False)
    state = PrintedState(model, epoch=0, batch=0, step=0)

    @hvd.elastic.run
    def train(state):
        model.fit(batches(x, y, state.step), steps_per_epoch=STEPS_PER_EPOCH,
                  initial_epoch=state.epoch, epochs=EPOCHS, verbose=0, callbacks=[
                      CountSteps(state), hvd.elastic.UpdateBatchStateCallback(state),
                      hvd.elastic.UpdateEpochStateCallback(state),
                      hvd.elastic.CommitStateCallback(state, batches_per_commit=10 ** 9)])

    train(state)
    if (state.epoch, state.step) != (EPOCHS, EPOCHS * STEPS_PER_EPOCH):
        print("FAIL: rank %d ended at epoch %d step %d, expected epoch %d step %d"
              % (hvd.rank(), state.epoch, state.step, EPOCHS, EPOCHS * STEPS_PER_EPOCH),
              flush=True)
        return 1
    digest, total = checksum(model)
    print("rank %d: parameter checksum %s (sum %.10e)" % (hvd.rank(), digest, total), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())

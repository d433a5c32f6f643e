"""One worker of run_tf_tests.py elastic-kill: a custom training loop with
DistributedGradientTape under @hvd.elastic.run with a TensorFlowKerasState,
printing the lines tests/python/elastic_example_jobs.py reads:

    commit: generation G rank R size N epoch E batch B step S
    step-time: generation G rank R size N step S time T
    rank R: parameter checksum D (sum X)                      (at the end)
"""

import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import tutti.tensorflow as hvd
from tutti import elastic as tutti_elastic

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
from tensorflow_fashion_mnist import checksum  # noqa: E402 (the example's weight checksum)

STEPS, COMMIT_EVERY, BATCH = 120, 5, 16


def where():
    return "generation %d rank %d size %d" % (tutti_elastic.generation(), hvd.rank(),
                                               hvd.size())


def data_and_model():
    """(x, y, model): a linear target of 4 features and a small MLP, the same on
    every worker (keras_elastic_worker.py uses them too)."""
    keras.utils.set_random_seed(7)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    return x, y, model


def main():
    hvd.init()
    x, y, model = data_and_model()
    opt = keras.optimizers.SGD(0.01)
    state = hvd.elastic.TensorFlowKerasState(model, opt, epoch=0, batch=0, step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < STEPS:
            start = (state.step * hvd.size() + hvd.rank()) * BATCH % len(x)
            xb, yb = x[start:start + BATCH], y[start:start + BATCH]
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(xb) - yb) ** 2)
            tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply(grads, model.trainable_variables)
            state.step += 1
            state.batch += 1
            print("step-time: %s step %d time %.6f" % (where(), state.step, time.time()),
                  flush=True)
            time.sleep(0.02)
            if state.step % COMMIT_EVERY == 0:
                state.commit()
                print("commit: %s epoch %d batch %d step %d"
                      % (where(), state.epoch, state.batch, state.step), flush=True)

    train(state)
    digest, total = checksum(model)
    print("rank %d: parameter checksum %s (sum %.10e)" % (hvd.rank(), digest, total), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())

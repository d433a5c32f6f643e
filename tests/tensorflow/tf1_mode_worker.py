"""One rank of run_tf_tests.py tf1-mode: a TensorFlow 1 script as Horovod users
wrote them (tf.compat.v1.disable_v2_behavior(): graph mode, reference
variables, control flow v1), run with tutti.tensorflow: broadcast_global_variables,
broadcast_, DistributedOptimizer(MomentumOptimizer, backward_passes_per_step=2)
against a numpy replay, and the object functions in the session. Prints
"tf1-mode: ok" and exits 0, or prints what differed and exits 1."""

import sys

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_v2_behavior()

import tutti.tensorflow as hvd  # noqa: E402

v1 = tf.compat.v1
LR, MOMENTUM, PASSES = 0.1, 0.9, 2
W0 = np.array([[0.5], [-0.25], [1.0]], np.float32)


def rank_data(r):
    rng = np.random.default_rng(7 + r)
    return rng.normal(size=(6, 3)).astype(np.float32), rng.normal(size=(6, 1)).astype(np.float32)


def mean_grad(w, n):
    grads = [2.0 * x.T @ (x @ w - y) / len(x) for x, y in map(rank_data, range(n))]
    return np.mean(grads, axis=0)


def expected_history(n, steps):
    """w after each pass: momentum SGD applied every PASSES passes to the
    sum of the passes' gradients (the same w in each), averaged over ranks."""
    w, accum, history = W0.astype(np.float64), np.zeros_like(W0, np.float64), []
    for step in range(1, steps + 1):
        if step % PASSES == 0:
            accum = MOMENTUM * accum + PASSES * mean_grad(w, n)
            w = w - LR * accum
        history.append(w.copy())
    return history


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    x, y = rank_data(r)
    w = v1.Variable(W0 * (r + 1), name="w")  # differs per rank: the broadcast fixes it
    step = v1.train.get_or_create_global_step()
    loss = tf.reduce_mean((tf.constant(x) @ w - tf.constant(y)) ** 2)
    opt = hvd.DistributedOptimizer(v1.train.MomentumOptimizer(LR, MOMENTUM),
                                   backward_passes_per_step=PASSES)
    train = opt.minimize(loss, global_step=step)
    bcast = hvd.broadcast_global_variables(0)
    inplace = hvd.broadcast_([w], 0)
    errors = []
    with v1.Session() as sess:
        sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
        sess.run(bcast)
        if not np.array_equal(sess.run(inplace)[0], W0):
            errors.append("broadcast_ gave %s" % sess.run(w).ravel())
        for k, want in enumerate(expected_history(n, 4)):
            sess.run(train)
            if not np.allclose(sess.run(w), want, rtol=1e-5, atol=1e-6):
                errors.append("pass %d: w %s, expected %s" % (k + 1, sess.run(w).ravel(),
                                                               want.ravel()))
        if sess.run(step) != 4:
            errors.append("global_step %d, expected 4" % sess.run(step))
        if hvd.broadcast_object({"r": r}, n - 1, session=sess) != {"r": n - 1}:
            errors.append("broadcast_object")
        if hvd.allgather_object(r, session=sess) != list(range(n)):
            errors.append("allgather_object")
    hvd.shutdown()
    print("tf1-mode: %s" % ("ok" if not errors else "; ".join(errors)), flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

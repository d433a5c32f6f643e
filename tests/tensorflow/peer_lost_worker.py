"""One rank of run_tf_tests.py peer-lost: after a first allreduce the last rank
SIGKILLs itself; every other rank's next allreduce must fail, not hang:
eagerly with tf.errors.UnavailableError; in a tf.function TensorFlow turns
an UnavailableError of an op that is not one of its own communication ops
into an InternalError saying so ("originally returned UnavailableError").
Prints

    rank R: failed after <s> s (<how>, <error class>): <message>

per failed op and exits 0 (3 when an op did not fail as it should)."""

import os
import signal
import sys
import time

import tensorflow as tf

import tutti.tensorflow as hvd


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    hvd.allreduce(tf.ones([8]), op=hvd.Sum)
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    failures = 0
    for how, fn in (("eager", hvd.allreduce), ("tf.function", tf.function(hvd.allreduce))):
        start = time.time()
        try:
            fn(tf.ones([1024]))
            print("rank %d: %s allreduce succeeded after the peer died" % (rank, how))
        except (tf.errors.UnavailableError, tf.errors.InternalError) as e:
            if isinstance(e, tf.errors.InternalError) and (
                    how == "eager" or "originally returned UnavailableError" not in str(e)):
                raise
            failures += 1
            print("rank %d: failed after %.2f s (%s, %s): %s"
                  % (rank, time.time() - start, how, type(e).__name__,
                     str(e).splitlines()[0][:160]), flush=True)
    return 0 if failures == 2 else 3


if __name__ == "__main__":
    sys.exit(main())

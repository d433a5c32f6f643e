"""tutti.keras: Horovod's horovod.keras for Keras 3 on the TensorFlow backend,
the same API as tutti.tensorflow.keras (``import tutti.keras as hvd``)."""

from tutti.tensorflow.keras import *  # noqa: F401,F403
from tutti.tensorflow.keras import (  # noqa: F401 (names * leaves out)
    DistributedOptimizer,
    PartialDistributedOptimizer,
    allgather,
    allreduce,
    broadcast,
    broadcast_global_variables,
    callbacks,
    elastic,
    reducescatter,
)

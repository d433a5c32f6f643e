"""tutti.keras.elastic: tutti.tensorflow.keras.elastic (Horovod's horovod.keras.elastic)."""

from tutti.tensorflow.keras.elastic import (  # noqa: F401
    CommitStateCallback,
    KerasState,
    UpdateBatchStateCallback,
    UpdateEpochStateCallback,
    run,
)

"""tutti.keras.callbacks: the callbacks of tutti.tensorflow.keras.callbacks."""

from tutti.tensorflow.keras.callbacks import (  # noqa: F401
    BestModelCheckpoint,
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
)

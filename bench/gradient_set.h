#pragma once

// The gradient-set benchmark on tutti: one training step's gradients of
// ResNet-50 (bench/resnet50_shapes.h: 161 float32 tensors, 25,557,032
// parameters) allreduced per step as a framework does it: 161 asynchronous
// in-place sum allreduces, enqueued in backward order (last layer first),
// then a wait on every handle. Between steps, untimed: every rank refills its
// gradients with rank + 1 (as a backward pass would write them), a barrier,
// and, with `check`, a check that every element is size (size + 1) / 2.
//
// Prints one "gradset" row (bench_util.h) named after the fusion threshold
// the runtime was started with (TUTTI_FUSION_THRESHOLD_BYTES; 0 = fusion off),
// then a comment line with the job's TUTTI_COMPRESSION and the bytes rank 0
// sent per timed step (Runtime::bytesSent()). With a lossy compression the
// check counts rounded sums as wrong: run it with check off.

#include <cstdint>

#include "coordinator/runtime.h"

namespace tutti::bench {

// `wrong`: elements wrong over all ranks and checked steps.
Status runGradientSet(Runtime& runtime, int steps, int warmups, bool check, int64_t* wrong);

}  // namespace tutti::bench

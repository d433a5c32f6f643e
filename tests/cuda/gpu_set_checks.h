#pragma once

// Checks of CUDA tensors over process sets through tutti::Runtime, shared by
// the GPU tests (tests/cuda/gpu_process_sets_test.cc, threads as ranks) and
// the multi-process GPU job (tests/cuda/gpu_set_job.cc, scripts/device-check).
// Each returns "" when every result matched its reference, else what
// differed (op, element, got, want). Needs a CUDA device (device 0); every
// member of `set` calls it at the same point, in the same order.

#include <string>

#include "coordinator/process_sets.h"
#include "coordinator/runtime.h"

namespace tutti {
namespace test {

// On CUDA tensors over `set` (this rank a member): a fused float32 sum
// allreduce, a float64 average, an allgather of uneven int32 blocks, a
// float32 broadcast from the set's last member (a global rank), and a
// reducescatter of 7 float32 rows; each against values computed here from
// every member's inputs (exact: small integers).
std::string checkSetCollectivesOnCuda(Runtime& rt, const ProcessSetInfo& set);

// Adasum (float32 and float64) on CUDA tensors over `set` against the same
// Adasum on CPU tensors (tutti's CPU Adasum): bit for bit. The set's size
// must be a power of two.
std::string checkAdasumOnCuda(Runtime& rt, const ProcessSetInfo& set);

}  // namespace test
}  // namespace tutti

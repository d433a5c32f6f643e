#pragma once

// Tensor fusion: many small allreduces become one collective.
//
// planFusion runs on rank 0 over the responses decided in one round. Op
// allreduce responses with the same dtype, reduce op, prescale, postscale,
// device, joined ranks and compression spec are merged, in decision order, into groups whose
// total size is at most `threshold_bytes`; the fused Response lists every
// name and its element count (Response.sizes). A tensor larger than the
// threshold, every other collective and every error stay a Response of their
// own. threshold_bytes == 0 disables fusion. A fused Response takes the place
// of its first member; the output is the order every rank executes.
//
// FusionBuffer is the executor's staging memory: allocated once, grown when a
// larger fused response comes, never shrunk (so steady-state rounds do not
// allocate). Used only by the background thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/message.h"

namespace tutti {

std::vector<Response> planFusion(std::vector<Response> ready, int64_t threshold_bytes);

class FusionBuffer {
 public:
  // At least `bytes` bytes of scratch, 64-byte aligned; previous contents are
  // not kept when it grows.
  uint8_t* reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], AlignedDelete> data_;
  size_t capacity_ = 0;
};

}  // namespace tutti

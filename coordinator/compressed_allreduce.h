#pragma once

// The compression stage of the executor: one allreduce Response (one tensor
// or a fused group) through a Compressor, per the protocol in
// compression/compressor.h. The executor calls it for op kSum/kAverage when
// the Response's compression spec is not "none" and the compressor
// appliesTo() the dtype; everything else takes the uncompressed path.
//
//  - Cast kinds (fp16, bf16; ExchangeKind::kAllreduce): the fused buffer is
//    staged (prescaled copy, zeros for a joined rank), compressed as a whole,
//    allreduced in float16/bfloat16 (the ring adds in float32), and
//    decompressed into each output. For kAverage the 1/size is applied before
//    the sum (as a prescale) so that float16 sums stay below 65504. With
//    ":cross_host" the staged float32 buffer goes to
//    Backend::allreduceCastAcrossHosts first (cast only across hosts), and
//    the whole buffer is cast only where that does not run.
//  - Re-quantised kinds (int8; kQuantisedRing): the fused group goes as one
//    float32 vector through coordinator/compressed_ring_allreduce.h (ring
//    reduce-scatter of quantised chunks, re-quantised at each hop with the
//    tensors' residuals, then an allgather of the reduced chunks), and is
//    written back to each output with postscale (and 1/size for kAverage).
//    Residuals stay per tensor name, one float32 per element.
//  - Sparse kinds (topk; kAllgather): each tensor is
//    compressed on its own under its own name (error-feedback residuals are
//    per tensor, whatever the fusion), the chunks are allgathered (their
//    sizes are what compress() produced, the same on every rank),
//    and every rank sums every rank's chunk in float32 into the output, then
//    applies postscale (and 1/size for kAverage).
//
// Errors: the backend's status, or the compressor's (kInvalidArgument: a
// count the format cannot hold; a chunk that does not decode, which would be
// a bug or a rank with other settings). Outputs are complete only on success.
//
// Threading: background thread only; compress() runs under
// CompressorSet::lockState(), and the ring's residuals are copied in and out
// under it, so residual snapshots never see half a step.

#include <cstdint>
#include <vector>

#include "compression/compressor.h"
#include "coordinator/compressed_ring_allreduce.h"
#include "coordinator/compressor_set.h"
#include "coordinator/fusion.h"
#include "coordinator/tensor_queue.h"
#include "core/message.h"
#include "core/status.h"
#include "ops/backend.h"

namespace tutti {

// Buffers reused between calls so steady-state steps do not allocate.
struct CompressionScratch {
  FusionBuffer staging;           // prescaled inputs / zeros of joined ranks
  std::vector<uint8_t> chunk;     // one tensor's compressed chunk
  std::vector<uint8_t> packed;    // this rank's chunks (or the cast wire buffer)
  std::vector<uint8_t> gathered;  // every rank's chunks
  std::vector<float> dense;       // float32 sums for non-float32 outputs (ring: all outputs)
  std::vector<float> own;         // kQuantisedRing: this rank's fused float32 contribution
  std::vector<float> residual;    // kQuantisedRing: the fused tensors' residuals
  QuantisedRingScratch ring;
};

// entries[i] is this rank's entry for r.names[i], or nullptr (a joined rank).
// `compressor` comes from `compressors` (which guards its state).
Status compressedAllreduce(const Response& r, const std::vector<const TensorEntry*>& entries,
                           Compressor& compressor, CompressorSet& compressors, Backend& backend,
                           int size, CompressionScratch* scratch);

}  // namespace tutti

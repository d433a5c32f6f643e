#pragma once

// Gradient compression: one interface for every compressor, and how the
// executor (coordinator/) drives it around a Backend.
//
// Compression sits between the fusion buffer and the backend, for allreduce
// with ReduceOp kSum or kAverage only (see isCompressibleReduceOp). Integer and
// bool tensors always pass through uncompressed (appliesTo() is false).
//
// Two kinds of exchange, chosen by exchangeKind():
//
// kAllreduce (casts: fp16, bf16). The compressed buffer is a plain array of
// `count` elements of wireDType(dtype), so the ring can reduce it (the ring's
// float16/bfloat16 reduction adds in float32 and rounds back):
//   1. compress(input, count, dtype, name, &wire)         // wire: count * 2 bytes
//   2. backend.allreduce(wire.data(), count, wireDType(dtype), ReduceOp::kSum)
//   3. decompress(wire.data(), wire.size(), output, count, dtype)
//   4. (kAverage) scaleInPlace(output, count, dtype, 1.0 / size)
//   A prescale (divide by size before step 1) keeps fp16 sums below 65504.
//
// kAllgather (topk). Packed chunks cannot be ring-summed, so every rank
// gathers every rank's chunk and sums them itself. A chunk's size is the same
// on every rank for the same call (it depends only on the count, the spec
// and, during a top-k warm-up, how many times the name was compressed before,
// which all ranks share), so no size exchange is needed; packedBytes(count)
// is the size outside a warm-up:
//   1. compress(input, count, dtype, name, &packed)        // pb = packed.size()
//   2. gathered.resize(size * pb);
//      backend.allgatherv(packed.data(), gathered.data(), vector(size, pb))
//   3. std::vector<float> dense(count, 0.0f);
//      for r in ranks: accumulate(gathered.data() + r * pb, pb, dense.data(), count)
//   4. fromFloat32(dense.data(), count, dtype, output);  then (kAverage) scale.
//
// kQuantisedRing (int8). Chunks are re-quantised hop by hop around a ring
// (coordinator/compressed_ring_allreduce.h): each rank dequantises what its
// left neighbour sent (accumulate), adds its own float32 contribution and its
// residual, and quantise()s the sum for the right neighbour; the reduced
// chunks are then allgathered. compress()/accumulate() keep the kAllgather
// contract (one rank's chunk), so a kQuantisedRing compressor may also be
// exchanged the kAllgather way; residualFor() gives the ring its per-tensor
// residual (one float32 per element, the error of the quantisations this rank
// made of that element).
//
// Names and error feedback. `name` keys the per-tensor residual of the error
// feedback compressors (topk, int8): compress() adds the residual left by the
// previous step of that name to the input, compresses the sum, and keeps what
// was not sent as the new residual (Seide et al., "1-Bit Stochastic Gradient
// Descent", Interspeech 2014; Karimireddy et al., "Error Feedback Fixes
// SignSGD", ICML 2019 (EF-SGD); Lin et al., "Deep Gradient Compression",
// ICLR 2018). Call compress once per tensor, on its slice of the fusion
// buffer, with the tensor's own name, so residuals survive changes in how
// tensors are fused; concatenate the chunks (sizes are packedBytes(count_i)).
// A residual is reset to zero when the element count for a name changes.
// residuals()/setResiduals() let elastic training commit and restore them.
//
// Building one: makeCompressor(spec) in compression/compressor_factory.h. The
// lossless zstd stage for wire segments is separate: ops/tcp/zstd_stage.h.
//
// Threading: a Compressor is used by the background thread only (or by one
// worker thread at a time); it is not thread-safe. Ownership: the runtime owns
// one Compressor per spec in use.
//
// Errors: compress returns kInvalidArgument for a dtype appliesTo() rejects or
// a count the format cannot hold; decompress/accumulate return kInvalidArgument
// for a packed buffer whose size or header does not match (never an over-read).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tutti {

enum class ExchangeKind {
  kAllreduce,      // compressed buffer is ring-reducible: allreduce it in wireDType()
  kAllgather,      // compressed chunks are allgathered and summed by accumulate()
  kQuantisedRing,  // chunks re-quantised at each ring hop (quantise()), then allgathered
};

// Residual (error feedback) per tensor name: count float32 values each.
using ResidualMap = std::unordered_map<std::string, std::vector<float>>;

// Compression applies to sums only (kAverage is a sum, then a scale).
inline bool isCompressibleReduceOp(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kAverage;
}

class Compressor {
 public:
  virtual ~Compressor() = default;

  // Canonical spec string: "none", "fp16", "bf16", "topk:0.01", "int8:256".
  // makeCompressor(spec()) builds an equal compressor.
  virtual std::string spec() const = 0;

  virtual ExchangeKind exchangeKind() const = 0;

  // True when tensors of `dtype` are compressed. Integer and bool tensors:
  // never. Casts: float32, float64. Sparse/quantised kinds: float16, bfloat16,
  // float32, float64. "none": never.
  virtual bool appliesTo(DataType dtype) const = 0;

  // kAllreduce only: the element type of the compressed buffer for an input of
  // `dtype` (float16 or bfloat16). For kAllgather kinds, kUInt8 (opaque bytes).
  virtual DataType wireDType(DataType dtype) const = 0;

  // kAllreduce only: cast only the bytes that cross hosts (the executor then
  // calls Backend::allreduceCastAcrossHosts with the uncompressed buffer and
  // wireDType(), and uses steps 1-3 above only where that does not run).
  virtual bool crossHostOnly() const { return false; }

  // Exact size in bytes of the compressed buffer for `count` elements (any
  // dtype appliesTo() accepts). The same on every rank with the same spec.
  // (top-k during its warm-up: larger, see compression/topk_compressor.h.)
  virtual size_t packedBytes(size_t count) const = 0;

  // Compresses `count` elements of `dtype` at `input` into *out (resized to
  // packedBytes(count), or the warm-up size). `name` keys the residual of error feedback kinds.
  // kInvalidArgument when !appliesTo(dtype) or count is too large.
  virtual Status compress(const void* input, size_t count, DataType dtype, const std::string& name,
                          std::vector<uint8_t>* out) = 0;

  // Writes `count` elements of `dtype` at `output` from a compressed buffer.
  // kAllreduce: `packed` is the (reduced) wire buffer of count elements of
  // wireDType(dtype). kAllgather: one chunk, decoded to dense (zero where
  // nothing was sent). `bytes` must equal packedBytes(count).
  virtual Status decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                            DataType dtype) const = 0;

  // kAllgather only: dense_out[i] += the value chunk `packed` carries for i,
  // for the `count` elements of the tensor (float32 accumulation whatever the
  // tensor's dtype). On error, dense_out may be partly updated.
  virtual Status accumulate(const uint8_t* packed, size_t bytes, float* dense_out,
                            size_t count) const;

  // kQuantisedRing only: quantises `count` float32 values at `acc` into a
  // chunk of exactly packedBytes(count) bytes at `out` (the format compress()
  // writes; accumulate() decodes it) and leaves in acc[i] what the chunk does
  // not carry (acc[i] - decoded[i]), for the caller to keep as error feedback.
  // Other kinds: kInternal (a bug in the caller).
  virtual Status quantise(float* acc, size_t count, uint8_t* out) const;

  // kQuantisedRing only: the residual kept for `name`, exactly `count` float32
  // values (zeros when new or when the count changed). Mutable state: call
  // under CompressorSet::lockState(). Other kinds: nullptr.
  virtual std::vector<float>* residualFor(const std::string& name, size_t count);

  // Error feedback state, for elastic commit/restore. Empty for stateless
  // compressors, whose setResiduals ignores its argument.
  virtual const ResidualMap& residuals() const;
  virtual void setResiduals(ResidualMap residuals);
  virtual void clearResiduals() {}

 protected:
  // decompress() for chunks that accumulate() decodes (top-k, int8): zeroes
  // `output`, accumulates the chunk in float32 and converts to `dtype`.
  Status decompressByAccumulating(const uint8_t* packed, size_t bytes, void* output, size_t count,
                                  DataType dtype) const;
};

// Conversions between a tensor's dtype (float16, bfloat16, float32, float64)
// and float32, element by element (float16/bfloat16 use core/half.h's
// conversions; float64 -> float32 rounds to nearest). Other dtypes: a bug.
void toFloat32(const void* input, size_t count, DataType dtype, float* out);
void fromFloat32(const float* input, size_t count, DataType dtype, void* out);

}  // namespace tutti

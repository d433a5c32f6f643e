#pragma once

// int8 quantisation with a float32 scale per block of B elements, and error
// feedback (Seide et al. 2014, "1-Bit Stochastic Gradient Descent";
// Karimireddy et al. 2019, "Error Feedback Fixes SignSGD" (EF-SGD); the
// per-block scale as in Dettmers, "8-Bit Approximations for Parallelism in
// Deep Learning", ICLR 2016). Each step, for a tensor `name` with residual r:
// acc = gradient + r; per block, m = max|acc|, scale s = m / 127,
// q = round(acc / s) in [-127, 127] (half away from zero); r = acc - q * s.
//
// Error bound of one quantisation, per element of a block with scale s:
//   |acc - q * s| <= s / 2 + 2^-21 * m  =  s * (1/2 + 127 * 2^-21)  <  0.50007 * s
// (s/2 from rounding to an integer, the rest from float32 rounding of 127/m,
// acc * (127/m), m/127 and q * s). A block with m < 2^-100 (zeros, or values
// too small to scale) is sent as zeros with s = 0 and stays in the residual.
// A block holding inf or NaN is sent with s = NaN (the whole block decodes to
// NaN, as the uncompressed sum would be non-finite) and its residual is
// dropped, so one bad step does not poison later ones.
//
// Exchange: kQuantisedRing. int8 blocks with different scales cannot be
// ring-summed as they are, so each ring hop dequantises, adds and
// re-quantises (coordinator/compressed_ring_allreduce.h); one quantisation
// is one compress() or quantise() call, with the bound above. Chunk layout
// (compression/packed_format.h header with param = B, then): f32 scale[ceil(count / B)]; i8
// q[count]. packedBytes(count) = 16 + 4 * ceil(count / B) + count: 3.9x fewer bytes than float32 at
// B = 256.
//
// dtypes: float16, bfloat16, float32, float64 (acc and residual in float32).
// Threading: one thread at a time (the background thread).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compression/compressor.h"
#include "compression/error_feedback.h"
#include "core/compression_spec.h"

namespace tutti {

class Int8Compressor : public Compressor {
 public:
  static constexpr uint32_t kDefaultBlockSize = CompressionSpec::kDefaultInt8Block;
  static constexpr uint32_t kMaxBlockSize = CompressionSpec::kMaxInt8Block;

  // block_size in [1, kMaxBlockSize] (makeCompressor validates; else a bug).
  explicit Int8Compressor(uint32_t block_size = kDefaultBlockSize);

  uint32_t blockSize() const { return block_size_; }
  std::string spec() const override { return "int8:" + std::to_string(block_size_); }
  ExchangeKind exchangeKind() const override { return ExchangeKind::kQuantisedRing; }
  bool appliesTo(DataType dtype) const override;
  DataType wireDType(DataType /*dtype*/) const override { return DataType::kUInt8; }
  size_t packedBytes(size_t count) const override;
  Status compress(const void* input, size_t count, DataType dtype, const std::string& name,
                  std::vector<uint8_t>* out) override;
  Status decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                    DataType dtype) const override;
  Status accumulate(const uint8_t* packed, size_t bytes, float* dense_out,
                    size_t count) const override;
  Status quantise(float* acc, size_t count, uint8_t* out) const override;
  std::vector<float>* residualFor(const std::string& name, size_t count) override {
    return &residuals_.residualFor(name, count);
  }

  const ResidualMap& residuals() const override { return residuals_.all(); }
  void setResiduals(ResidualMap residuals) override { residuals_.set(std::move(residuals)); }
  void clearResiduals() override { residuals_.clear(); }

 private:
  size_t numBlocks(size_t count) const { return (count + block_size_ - 1) / block_size_; }

  uint32_t block_size_;
  ResidualStore residuals_;
  std::vector<float> scratch_;  // converted input for non-float32 dtypes
};

}  // namespace tutti

#include "compression/topk_compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "compression/packed_format.h"
#include "core/check.h"
#include "core/compression_spec.h"
#include "core/half.h"

namespace tutti {

using compression_detail::kPackedHeaderBytes;
using compression_detail::kPackedTopK;
using compression_detail::PackedHeader;

namespace {

// |x| with NaN as +inf, so that magnitudes are totally ordered (nth_element
// needs a strict weak order) and a NaN is sent rather than hidden.
inline float magnitude(float x) {
  const float m = std::fabs(x);
  return m != m ? std::numeric_limits<float>::infinity() : m;
}

// float16 bits of x, saturated to +-65504 for finite x beyond float16's range
// (the excess stays in the residual); inf and NaN as they are.
inline uint16_t saturatingHalf(float x) {
  constexpr float kMaxHalf = 65504.0f;
  if (x > kMaxHalf && x <= std::numeric_limits<float>::max()) return 0x7bffu;
  if (x < -kMaxHalf && x >= -std::numeric_limits<float>::max()) return 0xfbffu;
  return floatToHalf(x);
}

constexpr size_t kPairBytes = sizeof(uint32_t) + sizeof(uint16_t);

}  // namespace

TopKCompressor::TopKCompressor(double ratio, uint32_t warmup) : ratio_(ratio), warmup_(warmup) {
  TUTTI_CHECK(ratio > 0.0 && ratio <= 1.0);
}

double TopKCompressor::ratioAt(uint64_t n) const {
  if (warmup_over_ || n >= warmup_) return ratio_;
  constexpr double kFirstRatio = 0.25;  // DGC's first warm-up stage: 75 % sparsity
  const double r0 = std::max(ratio_, kFirstRatio);
  return r0 * std::pow(ratio_ / r0, static_cast<double>(n) / warmup_);
}

size_t TopKCompressor::packedBytesAt(uint64_t n, size_t count) const {
  return kPackedHeaderBytes + selectCount(ratioAt(n), count) * kPairBytes;
}

void TopKCompressor::setResiduals(ResidualMap residuals) {
  residuals_.set(std::move(residuals));
  steps_.clear();
  warmup_over_ = true;
}

void TopKCompressor::clearResiduals() {
  residuals_.clear();
  steps_.clear();
  warmup_over_ = true;
}

size_t TopKCompressor::selectCount(double ratio, size_t count) {
  if (count == 0) return 0;
  const double exact = ratio * static_cast<double>(count);
  const double k = std::ceil(exact - exact * 1e-9);
  return std::min(count, std::max<size_t>(1, static_cast<size_t>(k)));
}

std::string TopKCompressor::spec() const {
  CompressionSpec s;
  s.kind = CompressionSpec::Kind::kTopK;
  s.ratio = ratio_;
  s.warmup = warmup_;
  return canonicalCompressionSpec(s);
}

bool TopKCompressor::appliesTo(DataType dtype) const {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

size_t TopKCompressor::packedBytes(size_t count) const {
  return kPackedHeaderBytes + selectCount(ratio_, count) * kPairBytes;
}

Status TopKCompressor::compress(const void* input, size_t count, DataType dtype,
                                const std::string& name, std::vector<uint8_t>* out) {
  if (!appliesTo(dtype)) {
    return Status::invalidArgument(spec() + " compression of tensor '" + name + "': dtype " +
                                   dataTypeName(dtype) +
                                   " is not compressed (float16, bfloat16, float32, float64 are)");
  }
  if (count > std::numeric_limits<uint32_t>::max()) {
    return Status::invalidArgument(spec() + " compression of tensor '" + name +
                                   "': " + std::to_string(count) +
                                   " elements exceed the 2^32 - 1 that u32 indices address");
  }
  // The warm-up count restarts, as the residual does, when the count changes.
  WarmupCount& calls = steps_[name];
  if (calls.count != count) calls = WarmupCount{count, 0};
  const size_t k = selectCount(ratioAt(calls.calls++), count);
  std::vector<float>& acc = residuals_.residualFor(name, count);

  // acc = residual + gradient, in float32.
  if (dtype == DataType::kFloat32) {
    const auto* in = static_cast<const float*>(input);
    for (size_t i = 0; i < count; ++i) acc[i] += in[i];
  } else {
    scratch_.resize(count);
    toFloat32(input, count, dtype, scratch_.data());
    for (size_t i = 0; i < count; ++i) acc[i] += scratch_[i];
  }

  out->resize(kPackedHeaderBytes + k * kPairBytes);
  uint8_t* const index_out = out->data() + kPackedHeaderBytes;
  uint8_t* const value_out = index_out + k * sizeof(uint32_t);
  compression_detail::writePackedHeader(
      PackedHeader{kPackedTopK, static_cast<uint32_t>(k), static_cast<uint64_t>(count)},
      out->data());
  if (k == 0) return Status::ok();

  // Threshold t = the k-th largest magnitude: nth_element on a copy.
  scratch_.resize(count);
  for (size_t i = 0; i < count; ++i) scratch_[i] = magnitude(acc[i]);
  std::nth_element(scratch_.begin(), scratch_.begin() + static_cast<ptrdiff_t>(k - 1),
                   scratch_.end(), std::greater<float>());
  const float threshold = scratch_[k - 1];

  // Everything above t is sent; of the entries equal to t, the lowest indices
  // fill the remaining slots. Scanning in index order yields sorted indices.
  size_t above = 0;
  for (size_t i = 0; i < count; ++i) above += magnitude(acc[i]) > threshold ? 1 : 0;
  TUTTI_CHECK_LE(above, k);
  size_t ties_left = k - above;
  size_t j = 0;
  for (size_t i = 0; i < count; ++i) {
    const float m = magnitude(acc[i]);
    if (m < threshold) continue;
    if (m == threshold) {
      if (ties_left == 0) continue;
      --ties_left;
    }
    const auto index = static_cast<uint32_t>(i);
    const uint16_t value = saturatingHalf(acc[i]);
    std::memcpy(index_out + j * sizeof(uint32_t), &index, sizeof(uint32_t));
    std::memcpy(value_out + j * sizeof(uint16_t), &value, sizeof(uint16_t));
    // What float16 could not carry (rounding, saturation) stays in the
    // residual; a non-finite value is sent as it is and leaves nothing.
    const float rest = acc[i] - halfToFloat(value);
    acc[i] = std::isfinite(rest) ? rest : 0.0f;
    ++j;
  }
  TUTTI_CHECK_EQ(j, k);
  return Status::ok();
}

Status TopKCompressor::accumulate(const uint8_t* packed, size_t bytes, float* dense_out,
                                  size_t count) const {
  PackedHeader h;
  if (!compression_detail::readPackedHeader(packed, bytes, &h) || h.format != kPackedTopK) {
    return Status::invalidArgument(spec() + ": chunk of " + std::to_string(bytes) +
                                   " bytes has no valid top-k header (corrupt, or another "
                                   "compressor on the sending rank)");
  }
  if (h.count != count) {
    return Status::invalidArgument(spec() + ": chunk is for " + std::to_string(h.count) +
                                   " elements, this tensor has " + std::to_string(count));
  }
  const size_t k = h.param;
  if (k > count || bytes != kPackedHeaderBytes + k * kPairBytes) {
    return Status::invalidArgument(spec() + ": chunk of " + std::to_string(bytes) + " bytes with " +
                                   std::to_string(k) + " pairs for " + std::to_string(count) +
                                   " elements: sizes do not match");
  }
  const uint8_t* const index_in = packed + kPackedHeaderBytes;
  const uint8_t* const value_in = index_in + k * sizeof(uint32_t);
  uint32_t previous = 0;
  for (size_t j = 0; j < k; ++j) {
    uint32_t index;
    uint16_t value;
    std::memcpy(&index, index_in + j * sizeof(uint32_t), sizeof(uint32_t));
    std::memcpy(&value, value_in + j * sizeof(uint16_t), sizeof(uint16_t));
    if (index >= count || (j > 0 && index <= previous)) {
      return Status::invalidArgument(spec() + ": pair " + std::to_string(j) + " has index " +
                                     std::to_string(index) + " (indices must increase and be < " +
                                     std::to_string(count) + ")");
    }
    dense_out[index] += halfToFloat(value);
    previous = index;
  }
  return Status::ok();
}

Status TopKCompressor::decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                                  DataType dtype) const {
  return decompressByAccumulating(packed, bytes, output, count, dtype);
}

}  // namespace tutti

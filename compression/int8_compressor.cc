#include "compression/int8_compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "compression/packed_format.h"
#include "core/check.h"

namespace tutti {

using compression_detail::kPackedHeaderBytes;
using compression_detail::kPackedInt8;
using compression_detail::PackedHeader;

namespace {

// Blocks whose max |acc| is below 2^-100 are sent as zeros and stay in the
// residual: 127 / max would overflow near float32's subnormals, and values
// this small are far below any gradient's resolution.
constexpr uint32_t kMinMaxBits = (127u - 100u) << 23;  // bits of 2^-100

// max |x| over a block through the bit patterns: an integer max reduction
// vectorises (a float one does not without -ffast-math), and the result
// also tells inf/NaN apart (exponent all ones).
inline uint32_t maxAbsBits(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    m = std::max(m, bits & 0x7fffffffu);
  }
  return m;
}

// Quantises one block of acc into q and leaves acc - q * scale in acc.
inline void quantiseBlock(float* acc, size_t n, float scale, float inverse, int8_t* q) {
  for (size_t i = 0; i < n; ++i) {
    const float v = acc[i] * inverse;  // in [-127, 127] up to rounding
    const auto qi = static_cast<int32_t>(v + std::copysign(0.5f, v));  // half away from zero
    q[i] = static_cast<int8_t>(qi);
    acc[i] -= static_cast<float>(qi) * scale;
  }
}

}  // namespace

Int8Compressor::Int8Compressor(uint32_t block_size) : block_size_(block_size) {
  TUTTI_CHECK(block_size >= 1 && block_size <= kMaxBlockSize);
}

bool Int8Compressor::appliesTo(DataType dtype) const {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

size_t Int8Compressor::packedBytes(size_t count) const {
  return kPackedHeaderBytes + numBlocks(count) * sizeof(float) + count;
}

Status Int8Compressor::compress(const void* input, size_t count, DataType dtype,
                                const std::string& name, std::vector<uint8_t>* out) {
  if (!appliesTo(dtype)) {
    return Status::invalidArgument(spec() + " compression of tensor '" + name + "': dtype " +
                                   dataTypeName(dtype) +
                                   " is not compressed (float16, bfloat16, float32, float64 are)");
  }
  std::vector<float>& acc = residuals_.residualFor(name, count);
  if (dtype == DataType::kFloat32) {
    const auto* in = static_cast<const float*>(input);
    for (size_t i = 0; i < count; ++i) acc[i] += in[i];
  } else {
    scratch_.resize(count);
    toFloat32(input, count, dtype, scratch_.data());
    for (size_t i = 0; i < count; ++i) acc[i] += scratch_[i];
  }

  out->resize(packedBytes(count));
  return quantise(acc.data(), count, out->data());
}

Status Int8Compressor::quantise(float* acc, size_t count, uint8_t* out) const {
  const size_t blocks = numBlocks(count);
  compression_detail::writePackedHeader(
      PackedHeader{kPackedInt8, block_size_, static_cast<uint64_t>(count)}, out);
  uint8_t* const scale_out = out + kPackedHeaderBytes;
  auto* const q_out = reinterpret_cast<int8_t*>(scale_out + blocks * sizeof(float));

  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block_size_;
    const size_t n = std::min<size_t>(block_size_, count - begin);
    float* const block = acc + begin;
    const uint32_t max_bits = maxAbsBits(block, n);
    float scale;
    if (max_bits >= 0x7f800000u) {  // inf or NaN in the block
      scale = std::numeric_limits<float>::quiet_NaN();
      std::fill_n(q_out + begin, n, int8_t{0});
      std::fill_n(block, n, 0.0f);        // drop it: a non-finite residual never recovers
    } else if (max_bits < kMinMaxBits) {  // zeros, or too tiny to scale: keep it all
      scale = 0.0f;
      std::fill_n(q_out + begin, n, int8_t{0});
    } else {
      float max_abs;
      std::memcpy(&max_abs, &max_bits, sizeof(max_abs));
      scale = max_abs / 127.0f;
      quantiseBlock(block, n, scale, 127.0f / max_abs, q_out + begin);
    }
    std::memcpy(scale_out + b * sizeof(float), &scale, sizeof(float));
  }
  return Status::ok();
}

Status Int8Compressor::accumulate(const uint8_t* packed, size_t bytes, float* dense_out,
                                  size_t count) const {
  PackedHeader h;
  if (!compression_detail::readPackedHeader(packed, bytes, &h) || h.format != kPackedInt8) {
    return Status::invalidArgument(spec() + ": chunk of " + std::to_string(bytes) +
                                   " bytes has no valid int8 header (corrupt, or another "
                                   "compressor on the sending rank)");
  }
  if (h.param != block_size_) {
    return Status::invalidArgument(spec() + ": chunk uses blocks of " + std::to_string(h.param) +
                                   " elements, this rank " + std::to_string(block_size_) +
                                   ": ranks use different compression settings");
  }
  if (h.count != count || bytes != packedBytes(count)) {
    return Status::invalidArgument(spec() + ": chunk of " + std::to_string(bytes) + " bytes for " +
                                   std::to_string(h.count) + " elements, expected " +
                                   std::to_string(packedBytes(count)) + " bytes for " +
                                   std::to_string(count));
  }
  const size_t blocks = numBlocks(count);
  const uint8_t* const scale_in = packed + kPackedHeaderBytes;
  const auto* const q_in = reinterpret_cast<const int8_t*>(scale_in + blocks * sizeof(float));
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * block_size_;
    const size_t n = std::min<size_t>(block_size_, count - begin);
    float scale;
    std::memcpy(&scale, scale_in + b * sizeof(float), sizeof(float));
    float* const out = dense_out + begin;
    const int8_t* const q = q_in + begin;
    for (size_t i = 0; i < n; ++i) out[i] += static_cast<float>(q[i]) * scale;
  }
  return Status::ok();
}

Status Int8Compressor::decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                                  DataType dtype) const {
  return decompressByAccumulating(packed, bytes, output, count, dtype);
}

}  // namespace tutti

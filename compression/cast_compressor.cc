#include "compression/cast_compressor.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "core/half.h"

namespace tutti {

namespace {

using ToWire = void (*)(const float*, uint16_t*, size_t);
using FromWire = void (*)(const uint16_t*, float*, size_t);

// Blocks of float32 on the stack for float64 tensors and unaligned wire
// buffers: the whole-buffer conversions of core/half.h do the work.
constexpr size_t kBlock = 1024;

// float64 narrows to float32 first (the 16-bit conversions take a float); the
// double rounding costs at most 2^-24 relative (documented).
void castDown(const void* input, size_t count, DataType dtype, ToWire to_wire, uint16_t* out) {
  if (dtype == DataType::kFloat32) return to_wire(static_cast<const float*>(input), out, count);
  const auto* in = static_cast<const double*>(input);
  float block[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    for (size_t i = 0; i < n; ++i) block[i] = static_cast<float>(in[start + i]);
    to_wire(block, out + start, n);
  }
}

// `in` may be any byte address (a slice of a larger receive buffer): when it
// is not 2-byte aligned it is copied to an aligned block first.
void castUp(const uint8_t* in, size_t count, DataType dtype, FromWire from_wire, void* output) {
  const bool aligned = reinterpret_cast<uintptr_t>(in) % alignof(uint16_t) == 0;
  if (dtype == DataType::kFloat32 && aligned) {
    return from_wire(reinterpret_cast<const uint16_t*>(in), static_cast<float*>(output), count);
  }
  uint16_t wire[kBlock];
  float block[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    std::memcpy(wire, in + 2 * start, 2 * n);
    if (dtype == DataType::kFloat32) {
      from_wire(wire, static_cast<float*>(output) + start, n);
      continue;
    }
    from_wire(wire, block, n);
    double* out = static_cast<double*>(output) + start;
    for (size_t i = 0; i < n; ++i) out[i] = block[i];
  }
}

}  // namespace

CastCompressor::CastCompressor(DataType wire, bool cross_host)
    : wire_(wire), cross_host_(cross_host) {
  TUTTI_CHECK(wire == DataType::kFloat16 || wire == DataType::kBFloat16);
}

std::string CastCompressor::spec() const {
  return std::string(wire_ == DataType::kFloat16 ? "fp16" : "bf16") +
         (cross_host_ ? ":cross_host" : "");
}

bool CastCompressor::appliesTo(DataType dtype) const {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

Status CastCompressor::compress(const void* input, size_t count, DataType dtype,
                                const std::string& name, std::vector<uint8_t>* out) {
  if (!appliesTo(dtype)) {
    return Status::invalidArgument(spec() + " compression of tensor '" + name + "': dtype " +
                                   dataTypeName(dtype) +
                                   " is not compressed (float32, float64 are)");
  }
  out->resize(packedBytes(count));
  // std::vector<uint8_t> storage comes from operator new: aligned for uint16_t.
  auto* wire = reinterpret_cast<uint16_t*>(out->data());
  castDown(input, count, dtype,
           wire_ == DataType::kFloat16 ? floatToHalfBuffer : floatToBfloat16Buffer, wire);
  return Status::ok();
}

Status CastCompressor::decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                                  DataType dtype) const {
  if (!appliesTo(dtype)) {
    return Status::invalidArgument(spec() + " decompression: dtype " +
                                   std::string(dataTypeName(dtype)) +
                                   " is not compressed (float32, float64 are)");
  }
  if (bytes != packedBytes(count)) {
    return Status::invalidArgument(spec() + " decompression: buffer of " + std::to_string(bytes) +
                                   " bytes for " + std::to_string(count) + " elements (expected " +
                                   std::to_string(packedBytes(count)) + ")");
  }
  castUp(packed, count, dtype,
         wire_ == DataType::kFloat16 ? halfToFloatBuffer : bfloat16ToFloatBuffer, output);
  return Status::ok();
}

}  // namespace tutti

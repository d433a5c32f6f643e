#include "compression/cast_compressor.h"

#include <cstring>

#include "core/check.h"
#include "ops/reduce.h"

namespace tutti {

namespace {

// Narrow to float32 first for float64 input: the 16-bit conversions take a
// float. The double rounding costs at most 2^-24 relative (documented).
template <typename In, uint16_t (*kToWire)(float)>
void castDown(const void* input, size_t count, uint16_t* out) {
  const auto* in = static_cast<const In*>(input);
  for (size_t i = 0; i < count; ++i) out[i] = kToWire(static_cast<float>(in[i]));
}

// `in` may be any byte address (a slice of a larger receive buffer): load
// through memcpy, which compiles to a plain (unaligned) load.
template <typename Out, float (*kFromWire)(uint16_t)>
void castUp(const uint8_t* in, size_t count, void* output) {
  auto* out = static_cast<Out*>(output);
  for (size_t i = 0; i < count; ++i) {
    uint16_t w;
    std::memcpy(&w, in + 2 * i, 2);
    out[i] = static_cast<Out>(kFromWire(w));
  }
}

}  // namespace

CastCompressor::CastCompressor(DataType wire) : wire_(wire) {
  TUTTI_CHECK(wire == DataType::kFloat16 || wire == DataType::kBFloat16);
}

std::string CastCompressor::spec() const {
  return wire_ == DataType::kFloat16 ? "fp16" : "bf16";
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
  const bool half = wire_ == DataType::kFloat16;
  if (dtype == DataType::kFloat32) {
    half ? castDown<float, floatToHalf>(input, count, wire)
         : castDown<float, floatToBfloat16>(input, count, wire);
  } else {
    half ? castDown<double, floatToHalf>(input, count, wire)
         : castDown<double, floatToBfloat16>(input, count, wire);
  }
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
  const uint8_t* wire = packed;
  const bool half = wire_ == DataType::kFloat16;
  if (dtype == DataType::kFloat32) {
    half ? castUp<float, halfToFloat>(wire, count, output)
         : castUp<float, bfloat16ToFloat>(wire, count, output);
  } else {
    half ? castUp<double, halfToFloat>(wire, count, output)
         : castUp<double, bfloat16ToFloat>(wire, count, output);
  }
  return Status::ok();
}

}  // namespace tutti

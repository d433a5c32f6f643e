#include "compression/compressor.h"

#include <algorithm>

#include "compression/error_feedback.h"
#include "core/check.h"
#include "core/half.h"

namespace tutti {

Status Compressor::accumulate(const uint8_t* /*packed*/, size_t /*bytes*/, float* /*dense_out*/,
                              size_t /*count*/) const {
  return Status::internal("compressor '" + spec() +
                          "' is exchanged by allreduce; accumulate() is for allgather kinds");
}

Status Compressor::quantise(float* /*acc*/, size_t /*count*/, uint8_t* /*out*/) const {
  return Status::internal("compressor '" + spec() +
                          "' is not re-quantised around a ring; quantise() is for kQuantisedRing");
}

std::vector<float>* Compressor::residualFor(const std::string& /*name*/, size_t /*count*/) {
  return nullptr;
}

const ResidualMap& Compressor::residuals() const {
  // Immutable and shared by every stateless compressor: not mutable state.
  static const ResidualMap kEmpty;
  return kEmpty;
}

void Compressor::setResiduals(ResidualMap /*residuals*/) {}

Status Compressor::decompressByAccumulating(const uint8_t* packed, size_t bytes, void* output,
                                            size_t count, DataType dtype) const {
  if (!appliesTo(dtype)) {
    return Status::invalidArgument(spec() + " decompression: dtype " +
                                   std::string(dataTypeName(dtype)) + " is not compressed");
  }
  if (dtype == DataType::kFloat32) {
    std::fill_n(static_cast<float*>(output), count, 0.0f);
    return accumulate(packed, bytes, static_cast<float*>(output), count);
  }
  std::vector<float> dense(count, 0.0f);
  TUTTI_RETURN_IF_ERROR(accumulate(packed, bytes, dense.data(), count));
  fromFloat32(dense.data(), count, dtype, output);
  return Status::ok();
}

std::vector<float>& ResidualStore::residualFor(const std::string& name, size_t count) {
  std::vector<float>& r = residuals_[name];
  if (r.size() != count) r.assign(count, 0.0f);
  return r;
}

// The 16-bit conversions are core/half.h's whole-buffer ones (vectorised);
// the float32/float64 loops vectorise here.
void toFloat32(const void* input, size_t count, DataType dtype, float* out) {
  switch (dtype) {
    case DataType::kFloat32: {
      const auto* in = static_cast<const float*>(input);
      for (size_t i = 0; i < count; ++i) out[i] = in[i];
      return;
    }
    case DataType::kFloat64: {
      const auto* in = static_cast<const double*>(input);
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]);
      return;
    }
    case DataType::kFloat16: {
      halfToFloatBuffer(static_cast<const uint16_t*>(input), out, count);
      return;
    }
    case DataType::kBFloat16: {
      bfloat16ToFloatBuffer(static_cast<const uint16_t*>(input), out, count);
      return;
    }
    default:
      TUTTI_CHECK(false && "toFloat32: not a floating point dtype");
  }
}

void fromFloat32(const float* input, size_t count, DataType dtype, void* out) {
  switch (dtype) {
    case DataType::kFloat32: {
      auto* o = static_cast<float*>(out);
      for (size_t i = 0; i < count; ++i) o[i] = input[i];
      return;
    }
    case DataType::kFloat64: {
      auto* o = static_cast<double*>(out);
      for (size_t i = 0; i < count; ++i) o[i] = input[i];
      return;
    }
    case DataType::kFloat16: {
      floatToHalfBuffer(input, static_cast<uint16_t*>(out), count);
      return;
    }
    case DataType::kBFloat16: {
      floatToBfloat16Buffer(input, static_cast<uint16_t*>(out), count);
      return;
    }
    default:
      TUTTI_CHECK(false && "fromFloat32: not a floating point dtype");
  }
}

}  // namespace tutti

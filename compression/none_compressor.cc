#include "compression/none_compressor.h"

#include <cstring>

namespace tutti {

Status NoneCompressor::compress(const void* input, size_t count, DataType dtype,
                                const std::string& /*name*/, std::vector<uint8_t>* out) {
  const size_t bytes = count * dataTypeSize(dtype);
  out->resize(bytes);
  if (bytes > 0) std::memcpy(out->data(), input, bytes);
  return Status::ok();
}

Status NoneCompressor::decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                                  DataType dtype) const {
  const size_t expected = count * dataTypeSize(dtype);
  if (bytes != expected) {
    return Status::invalidArgument("none: buffer of " + std::to_string(bytes) + " bytes for " +
                                   std::to_string(count) + " " + dataTypeName(dtype) +
                                   " elements (expected " + std::to_string(expected) + ")");
  }
  if (bytes > 0) std::memcpy(output, packed, bytes);
  return Status::ok();
}

}  // namespace tutti

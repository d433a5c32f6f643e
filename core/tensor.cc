#include "core/tensor.h"

#include <sstream>

namespace tutti {

int64_t numElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t rowElements(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

Status checkTensorFields(int dtype, int device, const Shape& shape, const void* data,
                         const std::string& what) {
  if (!isValidDataType(dtype)) {
    return Status::invalidArgument(what + " dtype " + std::to_string(dtype) +
                                   " is unknown: expected a dtype in [0, " +
                                   std::to_string(kNumDataTypes - 1) + "]");
  }
  if (device != static_cast<int>(DeviceType::kCpu) &&
      device != static_cast<int>(DeviceType::kCuda)) {
    return Status::invalidArgument(what + " device " + std::to_string(device) +
                                   " is unknown: expected cpu (0) or cuda (1)");
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return Status::invalidArgument(what + " shape " + shapeToString(shape) +
                                     " has a negative dimension (" + std::to_string(i) +
                                     "): dimensions must be >= 0");
    }
  }
  const int64_t elements = numElements(shape);
  if (data == nullptr && elements > 0) {
    const auto bytes = elements * static_cast<int64_t>(dataTypeSize(static_cast<DataType>(dtype)));
    return Status::invalidArgument(what + " data is null but the tensor " + shapeToString(shape) +
                                   " " + dataTypeName(static_cast<DataType>(dtype)) + " has " +
                                   std::to_string(bytes) + " bytes");
  }
  return Status::ok();
}

Status checkTensorView(const TensorView& t, const std::string& what) {
  return checkTensorFields(static_cast<int>(t.dtype), static_cast<int>(t.device), t.shape, t.data,
                           what);
}

std::string shapeToString(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

}  // namespace tutti

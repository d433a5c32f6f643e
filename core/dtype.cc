#include "core/dtype.h"

namespace tutti {

size_t dataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kInt16:
    case DataType::kUInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kUInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* dataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt16:
      return "int16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kBool:
      return "bool";
    case DataType::kUInt16:
      return "uint16";
    case DataType::kUInt32:
      return "uint32";
    case DataType::kUInt64:
      return "uint64";
  }
  return "invalid";
}

std::optional<DataType> parseDataType(const std::string& name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto dtype = static_cast<DataType>(i);
    if (name == dataTypeName(dtype)) return dtype;
  }
  return std::nullopt;
}

bool isFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

bool isValidDataType(int value) {
  return value >= 0 && value < kNumDataTypes;
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kAdasum:
      return "adasum";
  }
  return "invalid";
}

bool isValidReduceOp(int value) {
  return value >= 0 && value < kNumReduceOps;
}

}  // namespace tutti

#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace tutti {

// Element types of tensors. The numeric values are part of the wire format and
// of the C ABI (bindings/c/tutti.h mirrors them): never renumber.
enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kFloat16 = 5,   // IEEE 754 binary16
  kBFloat16 = 6,  // bfloat16: the upper 16 bits of a float32
  kFloat32 = 7,
  kFloat64 = 8,
  kBool = 9,  // one byte, 0 or 1
  // Unsigned wider integers (Horovod's and torch's uint16; TensorFlow's and
  // torch's uint32/uint64). Appended: the values above never change.
  kUInt16 = 10,
  kUInt32 = 11,
  kUInt64 = 12,
};
constexpr int kNumDataTypes = 13;

// Size of one element in bytes.
size_t dataTypeSize(DataType dtype);
// Lower-case name: "uint8", "float16", "bfloat16", ...
const char* dataTypeName(DataType dtype);
// Inverse of dataTypeName; nullopt when the name is unknown.
std::optional<DataType> parseDataType(const std::string& name);
bool isFloatingPoint(DataType dtype);
// True for a numeric value that is a valid DataType.
bool isValidDataType(int value);

// Reduction operators. Numeric values are part of the wire format and C ABI.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,  // sum, then divide by the number of contributing ranks
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  // Adaptive summation (Maleki et al., MLSys 2021; Horovod's Adasum): pairs
  // of ranks' vectors a, b combine as (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b
  // up a tree of ranks (ops/algorithms/allreduce_adasum.h). Allreduce only;
  // float16, float32, float64 only; power-of-two numbers of ranks only.
  kAdasum = 5,
};
constexpr int kNumReduceOps = 6;
const char* reduceOpName(ReduceOp op);
bool isValidReduceOp(int value);

}  // namespace tutti

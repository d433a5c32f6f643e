#pragma once

// Test-side tensors of any tutti dtype: element access through double (every
// value the case tests use is exact in double), float16/bfloat16 conversions
// independent of the library under test, and an element-wise comparison that
// names the first differing elements.

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tutti {
namespace test {

// IEEE binary16 and bfloat16 from/to float32, round to nearest even.
uint16_t floatToHalf(float value);
float halfToFloat(uint16_t bits);
uint16_t floatToBFloat16(float value);
float bfloat16ToFloat(uint16_t bits);

// Element `index` of a buffer of `dtype`, as a double. Bool reads 0 or 1.
double getElement(DataType dtype, const void* data, int64_t index);
// Stores `value` (rounded to the dtype; bool stores value != 0).
void setElement(DataType dtype, void* data, int64_t index, double value);
// What `value` becomes once stored in `dtype`.
double roundTrip(DataType dtype, double value);

using ElementFn = std::function<double(int64_t index)>;

// An owned, contiguous, zero-initialised host tensor.
class HostTensor {
 public:
  HostTensor(DataType dtype, Shape shape);
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numElements() const { return tutti::numElements(shape_); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  TensorView view() { return TensorView{bytes_.data(), dtype_, shape_}; }
  double get(int64_t index) const { return getElement(dtype_, bytes_.data(), index); }
  void set(int64_t index, double value) { setElement(dtype_, bytes_.data(), index, value); }
  void fill(const ElementFn& value);

 private:
  DataType dtype_;
  Shape shape_;
  std::vector<uint8_t> bytes_;
};

// Every element i of `data` equals roundTrip(dtype, expected(i)), exactly or,
// with rel_tol > 0, within rel_tol relative error. On failure the message
// names the number of wrong elements and the first few (index, expected, got).
::testing::AssertionResult elementsMatch(DataType dtype, const void* data, int64_t count,
                                         const ElementFn& expected, double rel_tol = 0);
::testing::AssertionResult elementsMatch(const OwnedTensor& tensor, const ElementFn& expected,
                                         double rel_tol = 0);
::testing::AssertionResult elementsMatch(const HostTensor& tensor, const ElementFn& expected,
                                         double rel_tol = 0);

// Every dtype, in enum order; the ones that are integers (not bool, not float).
const std::vector<DataType>& allDataTypes();
bool isSignedOrFloat(DataType dtype);
bool isInteger(DataType dtype);

}  // namespace test
}  // namespace tutti

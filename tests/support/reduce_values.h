#pragma once

// Inputs for reduction tests whose results are exact in every dtype at world
// sizes up to 8 (int8 and bfloat16 included), and the expected results,
// computed independently of tutti by folding the inputs over the ranks.
//
//   sum       x_i + r               -> size·x_i + size(size−1)/2
//   average   x_i + 2r              -> x_i + size − 1 (an exact integer)
//   min/max   x_i + (i(r+1)+r) % 7  (rank-dependent)
//   product   2, 3, 1 or −1 by (i+r) % 4 (|result| <= 36)
//   bool      sum/max: (i+r) % (size+1) == 0 (logical or); min/product: the
//             negation (logical and)
// where x_i = i % 11, minus 5 for signed and float dtypes.

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace tutti {
namespace test {

double baseValue(DataType dtype, int64_t index);
double reduceInput(DataType dtype, ReduceOp op, int64_t index, int rank, int size);
double reduceExpected(DataType dtype, ReduceOp op, int64_t index, int size);
// Bool takes every op but average.
bool opAllowed(DataType dtype, ReduceOp op);
// 0 (exact) except averages of float16/bfloat16, which may round once.
double reduceTolerance(DataType dtype, ReduceOp op);

}  // namespace test
}  // namespace tutti

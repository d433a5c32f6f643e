// docs/cases.md 1 and 2 over the whole matrix: world size × dtype × reduce op ×
// count. Every rank checks every element of every result.

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/reduce_values.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

constexpr int64_t kSegmentBytes = 4096;

// Counts 0, 1, a prime, the segment size ± 1 element, then 2-D and 3-D shapes.
std::vector<Shape> matrixShapes(DataType dtype) {
  const int64_t segment = kSegmentBytes / static_cast<int64_t>(dataTypeSize(dtype));
  return {{0}, {1}, {1009}, {segment - 1}, {segment + 1}, {7, 13}, {3, 5, 67}};
}

using MatrixParam = std::tuple<int, DataType, ReduceOp>;

class AllreduceMatrixTest : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(AllreduceMatrixTest, EveryRankGetsTheReduction) {
  const auto [size, dtype, op] = GetParam();
  ClusterOptions options;
  options.segment_bytes = kSegmentBytes;
  runThreadRanks(
      size,
      [&, size = size, dtype = dtype, op = op](Runtime& rt) {
        const int rank = rt.rank();
        EXPECT_EQ(rt.size(), size);
        const std::vector<Shape> shapes = matrixShapes(dtype);
        for (size_t s = 0; s < shapes.size(); ++s) {
          SCOPED_TRACE("shape " + shapeToString(shapes[s]));
          HostTensor input(dtype, shapes[s]);
          HostTensor output(dtype, shapes[s]);
          input.fill([&](int64_t i) { return reduceInput(dtype, op, i, rank, size); });
          // Poison the output so an untouched buffer cannot pass.
          output.fill([](int64_t) { return 77; });
          OpOptions opts;
          opts.name = indexedName("matrix", static_cast<int64_t>(s));
          opts.reduce_op = op;
          Status st = runOpStatus(
              rt, [&](Handle* h) { return rt.allreduce(input.view(), output.view(), opts, h); });
          ASSERT_TRUE(IsOk(st));
          EXPECT_TRUE(elementsMatch(
              output, [&](int64_t i) { return reduceExpected(dtype, op, i, size); },
              reduceTolerance(dtype, op)));
          // The input is borrowed, never written.
          EXPECT_TRUE(elementsMatch(
              input, [&](int64_t i) { return reduceInput(dtype, op, i, rank, size); }));
        }
      },
      options);
}

std::string matrixName(const ::testing::TestParamInfo<MatrixParam>& info) {
  return "size" + std::to_string(std::get<0>(info.param)) + "_" +
         dataTypeName(std::get<1>(info.param)) + "_" + reduceOpName(std::get<2>(info.param));
}

// The full matrix at every world size: each job costs tens of milliseconds
// over loopback, so nothing needs to be left out.
std::vector<MatrixParam> fullMatrix(std::initializer_list<int> sizes) {
  std::vector<MatrixParam> params;
  for (int size : sizes) {
    for (DataType dtype : allDataTypes()) {
      for (int o = 0; o < kNumReduceOps; ++o) {
        const auto op = static_cast<ReduceOp>(o);
        if (opAllowed(dtype, op)) params.emplace_back(size, dtype, op);
      }
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Sizes1To4, AllreduceMatrixTest,
                         ::testing::ValuesIn(fullMatrix({1, 2, 3, 4})), matrixName);
INSTANTIATE_TEST_SUITE_P(Sizes5And8, AllreduceMatrixTest, ::testing::ValuesIn(fullMatrix({5, 8})),
                         matrixName);

}  // namespace
}  // namespace test
}  // namespace tutti

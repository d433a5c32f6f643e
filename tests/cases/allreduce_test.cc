// docs/cases.md 3-7: scale factors, in place, asynchronous fused ops, grouped
// allreduce, name reuse; plus the one tensor of at least 64 MiB.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/reduce_values.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

std::string sizeName(const ::testing::TestParamInfo<int>& info) {
  return "size" + std::to_string(info.param);
}

Status allreduceNow(Runtime& rt, HostTensor& in, HostTensor& out, const OpOptions& opts) {
  return runOpStatus(rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), opts, h); });
}

// ---- 3. prescale p, postscale q: q · Σ_r (p · x_r) --------------------------
struct Scales {
  double prescale;
  double postscale;
};

class AllreduceScaleTest : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceScaleTest, PostscaleTimesSumOfPrescaled) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    int op_index = 0;
    for (DataType dtype : allDataTypes()) {
      if (dtype == DataType::kBool) continue;
      // Floats: exact halves. Integers, as Horovod: each rank's p · x_r in
      // float64 truncated toward zero before the sum (p = 0.5 drops odd
      // halves per rank), then q · S truncated (0.4 · S is where truncation
      // and rounding differ).
      const std::vector<Scales> cases =
          isFloatingPoint(dtype)
              ? std::vector<Scales>{{0.5, 3.0}}
              : std::vector<Scales>{{2.0, 1.0}, {1.0, 0.4}, {2.0, 0.4}, {0.5, 1.0}, {0.5, 0.4}};
      for (const Scales& scales : cases) {
        SCOPED_TRACE(std::string(dataTypeName(dtype)) + " prescale " +
                     std::to_string(scales.prescale) + " postscale " +
                     std::to_string(scales.postscale));
        HostTensor in(dtype, {1009});
        HostTensor out(dtype, {1009});
        in.fill([&](int64_t i) { return baseValue(dtype, i) + rank; });
        OpOptions opts;
        opts.name = indexedName("scaled", op_index++);
        opts.prescale = scales.prescale;
        opts.postscale = scales.postscale;
        ASSERT_TRUE(IsOk(allreduceNow(rt, in, out, opts)));
        EXPECT_TRUE(elementsMatch(out, [&](int64_t i) {
          const bool real = isFloatingPoint(dtype);
          double sum = 0;
          for (int r = 0; r < size; ++r) {
            const double mine = scales.prescale * (baseValue(dtype, i) + r);
            sum += real ? mine : std::trunc(mine);
          }
          const double result = scales.postscale * sum;
          return real ? result : std::trunc(result);
        }));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllreduceScaleTest, ::testing::Values(1, 2, 3, 5), sizeName);

// ---- 4. output buffer = input buffer ----------------------------------------
class AllreduceInPlaceTest : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceInPlaceTest, SameResultAsOutOfPlace) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    int op_index = 0;
    for (DataType dtype : {DataType::kInt8, DataType::kInt32, DataType::kFloat16,
                           DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        const int64_t segment = 4096 / static_cast<int64_t>(dataTypeSize(dtype));
        for (int64_t count : {int64_t{1009}, segment + 1}) {
          SCOPED_TRACE(std::string(dataTypeName(dtype)) + " " + reduceOpName(op) + " count " +
                       std::to_string(count));
          HostTensor buffer(dtype, {count});
          buffer.fill([&](int64_t i) { return reduceInput(dtype, op, i, rank, size); });
          OpOptions opts;
          opts.name = indexedName("inplace", op_index++);
          opts.reduce_op = op;
          ASSERT_TRUE(IsOk(allreduceNow(rt, buffer, buffer, opts)));
          EXPECT_TRUE(
              elementsMatch(buffer, [&](int64_t i) { return reduceExpected(dtype, op, i, size); }));
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllreduceInPlaceTest, ::testing::Values(1, 2, 3, 4, 5, 8),
                         sizeName);

// ---- 5. fifty tensors in flight at once -------------------------------------
Shape asyncShape(int i) {
  switch (i % 3) {
    case 0:
      return {i + 1};
    case 1:
      return {i % 5 + 1, 7};
    default:
      return {2, 3, i % 4 + 1};
  }
}

class AllreduceAsyncTest : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceAsyncTest, FiftyTensorsEnqueuedWithoutWaiting) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    constexpr int kTensors = 50;
    const DataType dtypes[] = {DataType::kFloat32, DataType::kInt32, DataType::kFloat16};
    std::vector<std::unique_ptr<HostTensor>> ins, outs;
    std::vector<Handle> handles(kTensors, -1);
    int not_done_after_enqueue = 0;
    for (int t = 0; t < kTensors; ++t) {
      const DataType dtype = dtypes[t % 3];
      ins.push_back(std::make_unique<HostTensor>(dtype, asyncShape(t)));
      outs.push_back(std::make_unique<HostTensor>(dtype, asyncShape(t)));
      ins[t]->fill([&](int64_t i) { return baseValue(dtype, i + t) + rt.rank(); });
      OpOptions opts;
      opts.name = indexedName("async", t);
      ASSERT_TRUE(IsOk(rt.allreduce(ins[t]->view(), outs[t]->view(), opts, &handles[t])));
      if (!rt.poll(handles[t])) ++not_done_after_enqueue;
    }
    EXPECT_GE(not_done_after_enqueue, 1) << "every op was complete right after its enqueue: "
                                            "allreduce is not asynchronous";
    for (int t = 0; t < kTensors; ++t) {
      SCOPED_TRACE("tensor " + std::to_string(t) + " " + shapeToString(asyncShape(t)));
      EXPECT_TRUE(IsOk(finishHandle(rt, handles[t])));
      EXPECT_TRUE(elementsMatch(*outs[t], [&](int64_t i) {
        return size * baseValue(outs[t]->dtype(), i + t) + size * (size - 1) / 2.0;
      }));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllreduceAsyncTest, ::testing::Values(1, 2, 3, 4, 5, 8), sizeName);

// ---- 6. grouped allreduce of mixed shapes = allreducing each -----------------
class GroupedAllreduceTest : public ::testing::TestWithParam<int> {};

TEST_P(GroupedAllreduceTest, EqualsAllreducingEachTensor) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const std::vector<Shape> shapes = {{3}, {4, 5}, {2, 3, 4}, {1009}, {0}, {1}};
    std::vector<std::unique_ptr<HostTensor>> ins, grouped, single;
    std::vector<TensorView> in_views, out_views;
    for (size_t t = 0; t < shapes.size(); ++t) {
      ins.push_back(std::make_unique<HostTensor>(DataType::kFloat32, shapes[t]));
      grouped.push_back(std::make_unique<HostTensor>(DataType::kFloat32, shapes[t]));
      single.push_back(std::make_unique<HostTensor>(DataType::kFloat32, shapes[t]));
      ins[t]->fill([&](int64_t i) { return baseValue(DataType::kFloat32, i + 3 * t) + rt.rank(); });
      in_views.push_back(ins[t]->view());
      out_views.push_back(grouped[t]->view());
    }
    OpOptions opts;
    opts.name = "grp";
    std::vector<Handle> handles;
    ASSERT_TRUE(IsOk(rt.groupedAllreduce(in_views, out_views, opts, &handles)));
    ASSERT_EQ(handles.size(), shapes.size());
    for (Handle h : handles) EXPECT_TRUE(IsOk(finishHandle(rt, h)));
    for (size_t t = 0; t < shapes.size(); ++t) {
      SCOPED_TRACE("tensor " + std::to_string(t) + " " + shapeToString(shapes[t]));
      OpOptions one;
      one.name = indexedName("single", static_cast<int64_t>(t));
      ASSERT_TRUE(IsOk(allreduceNow(rt, *ins[t], *single[t], one)));
      EXPECT_TRUE(elementsMatch(*grouped[t], [&](int64_t i) { return single[t]->get(i); }));
      EXPECT_TRUE(elementsMatch(*grouped[t], [&](int64_t i) {
        return size * baseValue(DataType::kFloat32, i + 3 * t) + size * (size - 1) / 2.0;
      }));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, GroupedAllreduceTest, ::testing::Values(1, 2, 3, 5, 8), sizeName);

// ---- 7. a name is reused once its op completed -------------------------------
class AllreduceNameReuseTest : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceNameReuseTest, EveryStepReusesTheName) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    for (int step = 0; step < 6; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      HostTensor in(DataType::kInt32, {257});
      HostTensor out(DataType::kInt32, {257});
      in.fill([&](int64_t i) { return baseValue(DataType::kInt32, i) + rt.rank() + 100 * step; });
      OpOptions opts;
      opts.name = "grad/reused";
      ASSERT_TRUE(IsOk(allreduceNow(rt, in, out, opts)));
      EXPECT_TRUE(elementsMatch(out, [&](int64_t i) {
        return size * (baseValue(DataType::kInt32, i) + 100 * step) + size * (size - 1) / 2.0;
      }));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllreduceNameReuseTest, ::testing::Values(1, 2, 3, 5), sizeName);

// ---- bool takes sum/min/max/product only -------------------------------------
TEST(AllreduceBoolTest, AverageOfBoolIsInvalidArgument) {
  runThreadRanks(2, [](Runtime& rt) {
    HostTensor in(DataType::kBool, {8});
    HostTensor out(DataType::kBool, {8});
    OpOptions opts;
    opts.name = "bool.average";
    opts.reduce_op = ReduceOp::kAverage;
    EXPECT_TRUE(HasCode(allreduceNow(rt, in, out, opts), StatusCode::kInvalidArgument));
    // The runtime goes on: the same tensor with a valid op works.
    in.fill([&](int64_t i) { return (i + rt.rank()) % 3 == 0; });
    opts.name = "bool.max";
    opts.reduce_op = ReduceOp::kMax;
    ASSERT_TRUE(IsOk(allreduceNow(rt, in, out, opts)));
    EXPECT_TRUE(elementsMatch(out, [](int64_t i) { return i % 3 == 0 || (i + 1) % 3 == 0; }));
  });
}

// ---- one tensor of at least 64 MiB -------------------------------------------
TEST(AllreduceLargeTest, Float32Over64MiBOnTwoRanksInPlace) {
  constexpr int64_t kCount = (int64_t{64} << 20) / 4 + 3;  // 64 MiB + 12 bytes
  ClusterOptions options;
  options.segment_bytes = 1 << 20;  // the documented-size segments, not the tiny test ones
  runThreadRanks(
      2,
      [](Runtime& rt) {
        HostTensor buffer(DataType::kFloat32, {kCount});
        float* data = static_cast<float*>(buffer.data());
        for (int64_t i = 0; i < kCount; ++i) data[i] = static_cast<float>(i % 1000 + rt.rank());
        OpOptions opts;
        opts.name = "large";
        ASSERT_TRUE(IsOk(allreduceNow(rt, buffer, buffer, opts)));
        int64_t wrong = 0, first_wrong = -1;
        for (int64_t i = 0; i < kCount; ++i) {
          if (data[i] != static_cast<float>(2 * (i % 1000) + 1)) {
            if (first_wrong < 0) first_wrong = i;
            ++wrong;
          }
        }
        EXPECT_EQ(wrong, 0) << "first wrong element " << first_wrong << ": expected "
                            << (first_wrong < 0 ? 0 : 2 * (first_wrong % 1000) + 1) << ", got "
                            << (first_wrong < 0 ? 0.f : data[first_wrong]);
      },
      options);
}

}  // namespace
}  // namespace test
}  // namespace tutti

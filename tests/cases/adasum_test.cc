// Adasum (ReduceOp::kAdasum) through the Runtime, against
// tests/support/adasum_reference.h (the pairing evaluated in double without
// tutti): allreduce in and out of place with prescale and postscale, grouped
// (fused) allreduce and many asynchronous allreduces that fuse, each tensor
// combined on its own; orthogonal vectors add, equal ones give themselves, also
// at tiny magnitudes (Horovod's sqrt(DBL_MIN) zero test); a
// joined rank's zeros leave the others' vectors; over even and odd process
// sets, the members' Adasum; and the errors, on every rank: integer, bool and bfloat16 tensors,
// reducescatter, sizes that are not powers of two. Runs under the thread harness and under mpirun
// (tests/mpi/mpi_harness.cc: the sizes mpirun was started with).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/support/adasum_reference.h"
#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

std::string sizeName(const ::testing::TestParamInfo<int>& info) {
  return "size" + std::to_string(info.param);
}

// Rank r's value at element i of tensor k, in [-1, 1], exact in float16.
double inputValue(int r, int k, int64_t i) {
  return static_cast<double>(((i * 37 + r * 101 + k * 13) % 129) - 64) / 64.0;
}

// The reference for tensor k of `count` elements, rank r's input being
// prescale * value(r, k, i) rounded to dtype, times postscale.
std::vector<double> reference(int size, DataType dtype, int k, int64_t count, double prescale,
                              double postscale) {
  std::vector<std::vector<double>> per_rank(size);
  for (int r = 0; r < size; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      per_rank[r].push_back(prescale * roundTrip(dtype, inputValue(r, k, i)));
    }
  }
  std::vector<double> out = adasum_reference::tree(per_rank);
  for (double& v : out) v *= postscale;
  return out;
}

double tolerance(DataType dtype) {
  return dtype == DataType::kFloat16 ? 2e-2 : dtype == DataType::kFloat32 ? 1e-5 : 1e-12;
}

::testing::AssertionResult near(const HostTensor& got, const std::vector<double>& want,
                                DataType dtype) {
  double scale = 1;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got.get(static_cast<int64_t>(i));
    if (!(std::fabs(g - want[i]) <= tolerance(dtype) * scale)) {
      return ::testing::AssertionFailure() << dataTypeName(dtype) << " element " << i
                                           << ": expected " << want[i] << ", got " << g;
    }
  }
  return ::testing::AssertionSuccess();
}

OpOptions adasumOptions(const std::string& name) {
  OpOptions o = named(name);
  o.reduce_op = ReduceOp::kAdasum;
  return o;
}

const DataType kFloats[] = {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64};

// ---- single tensors: out of place, in place, prescale and postscale ---------
class AdasumAllreduceTest : public ::testing::TestWithParam<int> {};

TEST_P(AdasumAllreduceTest, MatchesTheReference) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    int n = 0;
    for (DataType dtype : kFloats) {
      for (const auto& [pre, post, in_place] : std::vector<std::tuple<double, double, bool>>{
               {1.0, 1.0, false}, {0.5, 3.0, false}, {1.0, 1.0, true}, {2.0, 0.25, true}}) {
        SCOPED_TRACE(std::string(dataTypeName(dtype)) + " prescale " + std::to_string(pre) +
                     " postscale " + std::to_string(post) + (in_place ? " in place" : ""));
        HostTensor in(dtype, {17, 59});
        HostTensor out(dtype, {17, 59});
        in.fill([&](int64_t i) { return inputValue(rank, 0, i); });
        OpOptions opts = adasumOptions(indexedName("adasum", n++));
        opts.prescale = pre;
        opts.postscale = post;
        HostTensor& result = in_place ? in : out;
        ASSERT_TRUE(IsOk(runOpStatus(
            rt, [&](Handle* h) { return rt.allreduce(in.view(), result.view(), opts, h); })));
        EXPECT_TRUE(near(result, reference(size, dtype, 0, 17 * 59, pre, post), dtype));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdasumAllreduceTest, ::testing::Values(1, 2, 4, 8), sizeName);

// ---- fused: a grouped allreduce and many async allreduces ------------------
class AdasumFusedTest : public ::testing::TestWithParam<int> {};

TEST_P(AdasumFusedTest, EachTensorIsCombinedOnItsOwn) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    const std::vector<int64_t> counts = {5, 300, 1, 64, 129, 2, 1000};
    for (DataType dtype : kFloats) {
      for (bool grouped : {true, false}) {
        SCOPED_TRACE(std::string(dataTypeName(dtype)) + (grouped ? " grouped" : " async"));
        std::vector<HostTensor> ins, outs;
        std::vector<TensorView> in_views, out_views;
        for (size_t k = 0; k < counts.size(); ++k) {
          ins.emplace_back(dtype, Shape{counts[k]});
          outs.emplace_back(dtype, Shape{counts[k]});
          ins.back().fill([&](int64_t i) { return inputValue(rank, static_cast<int>(k), i); });
        }
        for (size_t k = 0; k < counts.size(); ++k) {
          in_views.push_back(ins[k].view());
          out_views.push_back(outs[k].view());
        }
        std::vector<Handle> handles(counts.size(), -1);
        const std::string base = std::string("fused.") + dataTypeName(dtype);
        if (grouped) {
          ASSERT_TRUE(
              IsOk(rt.groupedAllreduce(in_views, out_views, adasumOptions(base + ".g"), &handles)));
        } else {
          for (size_t k = 0; k < counts.size(); ++k) {
            ASSERT_TRUE(
                IsOk(rt.allreduce(in_views[k], out_views[k],
                                  adasumOptions(indexedName(base + ".a", k)), &handles[k])));
          }
        }
        for (Handle h : handles) ASSERT_TRUE(IsOk(finishHandle(rt, h)));
        for (size_t k = 0; k < counts.size(); ++k) {
          EXPECT_TRUE(
              near(outs[k], reference(size, dtype, static_cast<int>(k), counts[k], 1, 1), dtype))
              << "tensor " << k;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdasumFusedTest, ::testing::Values(2, 4, 8), sizeName);

// ---- orthogonal vectors add; equal vectors give themselves -------------------
class AdasumExactTest : public ::testing::TestWithParam<int> {};

TEST_P(AdasumExactTest, OrthogonalAddAndEqualGiveThemselves) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    for (DataType dtype : kFloats) {
      SCOPED_TRACE(dataTypeName(dtype));
      // Rank r is non-zero on elements [4r, 4r + 4) only.
      HostTensor ortho(dtype, {4 * size + 1});
      ortho.fill([&](int64_t i) { return i / 4 == rank ? static_cast<double>(i % 4 + 1) : 0.0; });
      ASSERT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) {
        return rt.allreduce(ortho.view(), ortho.view(),
                            adasumOptions(std::string("ortho.") + dataTypeName(dtype)), h);
      })));
      EXPECT_TRUE(elementsMatch(
          ortho, [&](int64_t i) { return i < 4 * size ? static_cast<double>(i % 4 + 1) : 0.0; }));
      HostTensor same(dtype, {257});
      same.fill([&](int64_t i) { return inputValue(0, 3, i); });
      ASSERT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) {
        return rt.allreduce(same.view(), same.view(),
                            adasumOptions(std::string("same.") + dataTypeName(dtype)), h);
      })));
      EXPECT_TRUE(elementsMatch(same, [&](int64_t i) { return inputValue(0, 3, i); }));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdasumExactTest, ::testing::Values(1, 2, 4, 8), sizeName);

// ---- tiny magnitudes: Horovod's zero test is |v|^2 < sqrt(DBL_MIN) ----------
// Each dtype's smallest normal (np.finfo(dtype).tiny) and 1e-20 (below
// float16's range, so float32 and float64 only). Parallel: every rank holds
// the same two elements m, m; |v|^2 = 2 m^2 is far above sqrt(DBL_MIN) ~
// 1.5e-154 (but below the old 1e-8), so the vectors are combined and the
// result is v, except float64's 2^-1022, whose square is 0 in double: that
// vector counts as zero and every level adds, giving size * v (Horovod's
// result too). Orthogonal: rank r holds m at element r only: the sum.
struct TinyCase {
  DataType dtype;
  double magnitude;
  const char* label;
};

const TinyCase kTinyCases[] = {
    {DataType::kFloat16, 6.103515625e-05, "f16.tiny"},         // 2^-14
    {DataType::kFloat32, 1.1754943508222875e-38, "f32.tiny"},  // 2^-126
    {DataType::kFloat32, 1e-20, "f32.1e-20"},
    {DataType::kFloat64, 2.2250738585072014e-308, "f64.tiny"},  // DBL_MIN
    {DataType::kFloat64, 1e-20, "f64.1e-20"},
};

class AdasumTinyTest : public ::testing::TestWithParam<int> {};

TEST_P(AdasumTinyTest, TinyVectorsAreCombinedNotSummed) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const int rank = rt.rank();
    for (const TinyCase& c : kTinyCases) {
      SCOPED_TRACE(c.label);
      const double m = roundTrip(c.dtype, c.magnitude);
      ASSERT_GT(m, 0.0);
      const double factor = m * m == 0.0 ? size : 1.0;  // squares underflow: a zero vector
      HostTensor parallel(c.dtype, {2});
      parallel.fill([&](int64_t) { return m; });
      ASSERT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) {
        return rt.allreduce(parallel.view(), parallel.view(),
                            adasumOptions(std::string("tiny.par.") + c.label), h);
      })));
      EXPECT_TRUE(elementsMatch(parallel, [&](int64_t) { return factor * m; }));
      HostTensor ortho(c.dtype, {size + 1});
      ortho.fill([&](int64_t i) { return i == rank ? m : 0.0; });
      ASSERT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) {
        return rt.allreduce(ortho.view(), ortho.view(),
                            adasumOptions(std::string("tiny.ortho.") + c.label), h);
      })));
      EXPECT_TRUE(elementsMatch(ortho, [&](int64_t i) { return i < size ? m : 0.0; }));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdasumTinyTest, ::testing::Values(2, 4, 8), sizeName);

// ---- a joined rank contributes zeros: the others' Adasum is unchanged -------
TEST(AdasumJoinTest, JoinedRankLeavesTheOtherVector) {
  runThreadRanks(2, [](Runtime& rt) {
    if (rt.rank() == 0) {
      HostTensor x(DataType::kFloat32, {100});
      x.fill([&](int64_t i) { return inputValue(0, 0, i); });
      ASSERT_TRUE(IsOk(runOpStatus(
          rt, [&](Handle* h) { return rt.allreduce(x.view(), x.view(), adasumOptions("j"), h); })));
      EXPECT_TRUE(elementsMatch(x, [&](int64_t i) { return inputValue(0, 0, i); }));
    }
    OpResult joined = runOp(
        rt, [&](Handle* h) { return rt.join(h); }, kFetchJoin);
    ASSERT_TRUE(IsOk(joined.status));
  });
}

// ---- over a process set: the members' Adasum, in set-rank order -------------
class AdasumProcessSetTest : public ::testing::TestWithParam<int> {};

TEST_P(AdasumProcessSetTest, EvenAndOddSetsCombineTheirMembersOnly) {
  runThreadRanks(GetParam(), [](Runtime& rt) {
    const int size = rt.size();
    std::vector<std::vector<int>> sets(2);
    for (int r = 0; r < size; ++r) sets[r % 2].push_back(r);
    int32_t ids[2] = {-1, -1};
    for (int parity : {0, 1}) ASSERT_TRUE(IsOk(rt.addProcessSet(sets[parity], &ids[parity])));
    const std::vector<int>& members = sets[rt.rank() % 2];
    const int n = static_cast<int>(members.size());
    HostTensor x(DataType::kFloat32, {301});
    x.fill([&](int64_t i) { return inputValue(rt.rank(), 0, i); });
    OpOptions opts = adasumOptions("set.adasum");
    opts.process_set = ids[rt.rank() % 2];
    const Status st =
        runOpStatus(rt, [&](Handle* h) { return rt.allreduce(x.view(), x.view(), opts, h); });
    if ((n & (n - 1)) != 0) {
      EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
      EXPECT_TRUE(ContainsAll(st.message(), {"power-of-two", "has " + std::to_string(n)}));
    } else {
      ASSERT_TRUE(IsOk(st));
      std::vector<std::vector<double>> per_member;
      for (int m : members) {
        per_member.emplace_back();
        for (int64_t i = 0; i < 301; ++i) per_member.back().push_back(inputValue(m, 0, i));
      }
      EXPECT_TRUE(near(x, adasum_reference::tree(per_member), DataType::kFloat32));
    }
    // Leave together: a rank's shutdown stops the job.
    EXPECT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) { return rt.barrier(h); })));
  });
}

// Sets of 1, 2 (size 3: {0, 2} and {1}), 2 and 2, 3 and 3 (an error), 4 and 4.
INSTANTIATE_TEST_SUITE_P(Sizes, AdasumProcessSetTest, ::testing::Values(3, 4, 6, 8), sizeName);

// ---- errors, on every rank, and the job goes on -------------------------------
Status adasumOf(Runtime& rt, DataType dtype, const std::string& name) {
  HostTensor t(dtype, {8});
  return runOpStatus(
      rt, [&](Handle* h) { return rt.allreduce(t.view(), t.view(), adasumOptions(name), h); });
}

class AdasumErrorTest : public ::testing::TestWithParam<int> {};

TEST_P(AdasumErrorTest, RejectedOnEveryRankWithWhatIsAccepted) {
  const int size = GetParam();
  runThreadRanks(size, [size](Runtime& rt) {
    const bool power_of_two = (size & (size - 1)) == 0;
    for (DataType dtype :
         {DataType::kInt32, DataType::kUInt8, DataType::kBool, DataType::kBFloat16}) {
      const Status st = adasumOf(rt, dtype, std::string("bad.") + dataTypeName(dtype));
      EXPECT_TRUE(HasCode(st, StatusCode::kInvalidArgument));
      EXPECT_TRUE(ContainsAll(st.message(),
                              {"Adasum", "float16, float32 and float64", dataTypeName(dtype)}));
    }
    HostTensor rows(DataType::kFloat32, {size * 2, 3});
    OpResult scattered = runOp(rt, [&](Handle* h) {
      return rt.reducescatter(rows.view(), adasumOptions("bad.reducescatter"), h);
    });
    EXPECT_TRUE(HasCode(scattered.status, StatusCode::kInvalidArgument));
    EXPECT_TRUE(ContainsAll(scattered.status.message(), {"Adasum", "reducescatter"}));
    const Status floats = adasumOf(rt, DataType::kFloat32, "floats");
    if (power_of_two) {
      EXPECT_TRUE(IsOk(floats));
    } else {
      EXPECT_TRUE(HasCode(floats, StatusCode::kInvalidArgument));
      EXPECT_TRUE(ContainsAll(floats.message(), {"power-of-two", "has " + std::to_string(size)}));
    }
    // The job goes on.
    HostTensor sum(DataType::kFloat32, {5});
    sum.fill([](int64_t) { return 1.0; });
    ASSERT_TRUE(IsOk(runOpStatus(
        rt, [&](Handle* h) { return rt.allreduce(sum.view(), sum.view(), named("after"), h); })));
    EXPECT_TRUE(elementsMatch(sum, [&](int64_t) { return static_cast<double>(size); }));
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdasumErrorTest, ::testing::Values(2, 3, 5, 6), sizeName);

}  // namespace
}  // namespace test
}  // namespace tutti

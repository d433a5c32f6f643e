// Compressed allreduce across 2-5 simulated ranks equals the uncompressed sum
// within each compressor's bound; error feedback makes the sum of what was
// sent converge to the sum of the gradients; residuals commit and restore.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "compression/topk_compressor.h"
#include "tests/compression/compression_test_util.h"

namespace tutti {
namespace {

using testing::makeOrDie;
using testing::randomGradient;
using testing::simulateCompressedSum;

class ExchangeTest : public ::testing::TestWithParam<std::tuple<std::string, size_t, size_t>> {};

TEST_P(ExchangeTest, CompressedSumMatchesUncompressed) {
  const auto& [spec, ranks, count] = GetParam();
  std::vector<std::unique_ptr<Compressor>> comps;
  std::vector<std::vector<float>> inputs;
  std::vector<double> exact(count, 0.0);
  std::vector<double> abs_sum(count, 0.0);
  for (size_t r = 0; r < ranks; ++r) {
    comps.push_back(makeOrDie(spec));
    inputs.push_back(randomGradient(count, static_cast<uint32_t>(100 * r + count)));
    for (size_t i = 0; i < count; ++i) {
      exact[i] += inputs[r][i];
      abs_sum[i] += std::fabs(inputs[r][i]);
    }
  }
  const auto results = simulateCompressedSum(comps, inputs, count, "grad");
  for (size_t r = 1; r < ranks; ++r) ASSERT_EQ(results[r], results[0]) << "rank " << r;
  const std::vector<float>& got = results[0];

  if (spec == "fp16" || spec == "bf16") {
    // One rounding per input and one per partial sum of the ring (each
    // partial is at most sum|x|): |error| <= eps * (2 * ranks) * sum|x|.
    const double eps = spec == "fp16" ? std::exp2(-11) : std::exp2(-8);
    for (size_t i = 0; i < count; ++i) {
      // fp16 values below 2^-14 are subnormal: absolute 2^-25 per rounding.
      const double bound = eps * 2.0 * ranks * abs_sum[i] + 2.0 * ranks * std::exp2(-25);
      ASSERT_LE(std::fabs(got[i] - exact[i]), bound) << spec << " i " << i;
    }
  } else if (spec.rfind("int8", 0) == 0) {
    // Each rank's element is off by at most its block's bound.
    const size_t block = 256;
    for (size_t i = 0; i < count; ++i) {
      double bound = 0.0;
      const size_t begin = i / block * block;
      for (size_t r = 0; r < ranks; ++r) {
        float m = 0.0f;
        for (size_t j = begin; j < std::min(count, begin + block); ++j) {
          m = std::max(m, std::fabs(inputs[r][j]));
        }
        bound += m / 127.0 * (0.5 + 127.0 * std::exp2(-21));
      }
      ASSERT_LE(std::fabs(got[i] - exact[i]), bound + 1e-6 * abs_sum[i]) << spec << " i " << i;
    }
  } else {
    // top-k: the result plus what every rank kept back is the exact sum.
    for (size_t i = 0; i < count; ++i) {
      double kept = 0.0;
      for (size_t r = 0; r < ranks; ++r) kept += comps[r]->residuals().at("grad")[i];
      ASSERT_NEAR(got[i] + kept, exact[i], 1e-6 * abs_sum[i] + 1e-30) << spec << " i " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, ExchangeTest,
    ::testing::Combine(::testing::Values("fp16", "bf16", "topk:0.01", "topk:0.3", "int8"),
                       ::testing::Values(2, 3, 4, 5), ::testing::Values(1, 257, 4099)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param);
      for (char& c : name) c = (c == ':' || c == '.') ? '_' : c;
      return name + "_ranks" + std::to_string(std::get<1>(info.param)) + "_n" +
             std::to_string(std::get<2>(info.param));
    });

// Over many steps, sum(sent) = sum(gradients) - residual, and the residual
// stays bounded, so the relative gap shrinks as the sums grow.
class ErrorFeedbackTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ErrorFeedbackTest, SentConvergesToTrueSum) {
  const size_t count = 1000;
  const size_t steps = 2000;  // several times 1 / ratio for top-k at 1 %
  auto comp = makeOrDie(GetParam());
  std::vector<double> true_sum(count, 0.0);
  std::vector<double> sent_sum(count, 0.0);
  double max_residual_first_half = 0.0;
  double max_residual_second_half = 0.0;
  double gap_at_50 = 0.0;
  auto relativeGap = [&] {
    double num = 0.0;
    double den = 0.0;
    for (size_t i = 0; i < count; ++i) {
      num += std::fabs(sent_sum[i] - true_sum[i]);
      den += std::fabs(true_sum[i]);
    }
    return num / den;
  };
  std::mt19937 gen(42);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<uint8_t> packed;
  std::vector<float> sent(count);
  for (size_t step = 1; step <= steps; ++step) {
    // A drift (a consistent gradient direction) plus noise of the same size.
    std::vector<float> g(count);
    for (float& x : g) x = 1.0f + noise(gen);
    ASSERT_TRUE(comp->compress(g.data(), count, DataType::kFloat32, "layer", &packed).isOk());
    ASSERT_TRUE(
        comp->decompress(packed.data(), packed.size(), sent.data(), count, DataType::kFloat32)
            .isOk());
    for (size_t i = 0; i < count; ++i) {
      true_sum[i] += g[i];
      sent_sum[i] += sent[i];
    }
    double max_r = 0.0;
    const std::vector<float>& r = comp->residuals().at("layer");
    for (size_t i = 0; i < count; ++i) {
      // Invariant of error feedback: nothing lost, only delayed.
      ASSERT_NEAR(sent_sum[i] + r[i], true_sum[i], 1e-4 * (1.0 + std::fabs(true_sum[i])));
      max_r = std::max(max_r, static_cast<double>(std::fabs(r[i])));
    }
    double& half_max = step <= steps / 2 ? max_residual_first_half : max_residual_second_half;
    half_max = std::max(half_max, max_r);
    if (step == 50) gap_at_50 = relativeGap();
  }
  const double gap = relativeGap();
  RecordProperty("relative_gap", std::to_string(gap));
  std::printf("%s: relative gap %.2e at step 50, %.2e at step %zu; max residual %.3g / %.3g\n",
              GetParam().c_str(), gap_at_50, gap, steps, max_residual_first_half,
              max_residual_second_half);
  EXPECT_LT(gap, gap_at_50) << GetParam();
  EXPECT_LT(gap, 0.05) << GetParam();
  // Bounded: the residual does not keep growing.
  EXPECT_LT(max_residual_second_half, 2.0 * max_residual_first_half + 1e-3) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Compressors, ErrorFeedbackTest,
                         ::testing::Values("topk:0.01", "topk:0.1", "int8", "int8:64"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = (c == ':' || c == '.') ? '_' : c;
                           return name;
                         });

TEST(Residuals, ResetWhenTheCountChanges) {
  auto comp = makeOrDie("topk:0.1");
  std::vector<float> g(100, 1.0f);
  std::vector<uint8_t> packed;
  ASSERT_TRUE(comp->compress(g.data(), 100, DataType::kFloat32, "a", &packed).isOk());
  ASSERT_EQ(comp->residuals().at("a").size(), 100u);
  ASSERT_TRUE(comp->compress(g.data(), 50, DataType::kFloat32, "a", &packed).isOk());
  const std::vector<float>& r = comp->residuals().at("a");
  ASSERT_EQ(r.size(), 50u);
  // A fresh residual: only this step's unsent values remain (each 1.0).
  for (float x : r) EXPECT_TRUE(x == 0.0f || x == 1.0f);
}

TEST(Residuals, CommitAndRestoreReproduceTheSameSteps) {
  for (const char* spec : {"topk:0.05", "int8:32"}) {
    auto comp = makeOrDie(spec);
    std::vector<uint8_t> packed;
    for (uint32_t step = 0; step < 5; ++step) {
      const auto g = randomGradient(300, step);
      ASSERT_TRUE(comp->compress(g.data(), 300, DataType::kFloat32, "x", &packed).isOk());
    }
    const ResidualMap committed = comp->residuals();  // elastic commit
    const auto next = randomGradient(300, 99);
    std::vector<uint8_t> first;
    ASSERT_TRUE(comp->compress(next.data(), 300, DataType::kFloat32, "x", &first).isOk());

    auto restored = makeOrDie(spec);  // e.g. after re-initialisation
    restored->setResiduals(committed);
    std::vector<uint8_t> second;
    ASSERT_TRUE(restored->compress(next.data(), 300, DataType::kFloat32, "x", &second).isOk());
    EXPECT_EQ(first, second) << spec;
    comp->clearResiduals();
    EXPECT_TRUE(comp->residuals().empty());
  }
}

TEST(Residuals, KeyedByName) {
  auto comp = makeOrDie("topk:0.5");
  std::vector<float> a = {1, 2}, b = {3, 4, 5};
  std::vector<uint8_t> packed;
  ASSERT_TRUE(comp->compress(a.data(), 2, DataType::kFloat32, "a", &packed).isOk());
  ASSERT_TRUE(comp->compress(b.data(), 3, DataType::kFloat32, "b", &packed).isOk());
  EXPECT_EQ(comp->residuals().at("a"), (std::vector<float>{1, 0}));
  EXPECT_EQ(comp->residuals().at("b"), (std::vector<float>{3, 0, 0}));
}

}  // namespace
}  // namespace tutti

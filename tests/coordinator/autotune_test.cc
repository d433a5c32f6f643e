// Autotune end to end (TUTTI_AUTOTUNE=1, coordinator/parameter_manager.h):
// ranks as threads over loopback TCP run many steps of several allreduces
// while rank 0 tunes; every rank must switch at the same response list, every
// result must stay exact while the parameters change, and the CSV log must
// hold one row per scored sample and the best.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "tests/support/thread_harness.h"

namespace tutti {
namespace {

constexpr int kRanks = 3;
constexpr int kSteps = 70;
// Element counts of the "gradients" of one step: small ones that fuse, and
// one of 48 KiB that exceeds small thresholds.
const std::vector<int64_t> kSizes = {5, 300, 1000, 12288, 77, 4096};

// Exactly representable in float32: small integers.
float value(int rank, int step, size_t tensor, int64_t i) {
  return static_cast<float>((rank + 1) * (i % 7) + step % 5 + static_cast<int64_t>(tensor));
}

// `steps` steps of an allreduce of each of kSizes, each result checked
// against the exact sum.
void runSteps(Runtime& rt, int steps) {
  const int r = rt.rank();
  std::vector<std::vector<float>> in(kSizes.size()), out(kSizes.size());
  for (int step = 0; step < steps; ++step) {
    std::vector<Handle> handles(kSizes.size());
    for (size_t t = 0; t < kSizes.size(); ++t) {
      in[t].resize(static_cast<size_t>(kSizes[t]));
      out[t].assign(in[t].size(), -1);
      for (int64_t i = 0; i < kSizes[t]; ++i) in[t][static_cast<size_t>(i)] = value(r, step, t, i);
      OpOptions o;
      o.name = "grad." + std::to_string(t);
      ASSERT_TRUE(rt.allreduce({in[t].data(), DataType::kFloat32, {kSizes[t]}},
                               {out[t].data(), DataType::kFloat32, {kSizes[t]}}, o, &handles[t])
                      .isOk());
    }
    for (size_t t = 0; t < kSizes.size(); ++t) {
      ASSERT_TRUE(rt.wait(handles[t], 30).isOk()) << "step " << step;
      ASSERT_TRUE(rt.release(handles[t]).isOk());
      for (int64_t i = 0; i < kSizes[t]; ++i) {
        float want = 0;
        for (int q = 0; q < rt.size(); ++q) want += value(q, step, t, i);
        ASSERT_EQ(out[t][static_cast<size_t>(i)], want)
            << "step " << step << " tensor " << t << " element " << i;
      }
    }
  }
}

// Every rank made rank 0's switches, each before the same response list.
void expectSameHistories(const std::vector<std::vector<AutotuneChange>>& histories) {
  const std::vector<AutotuneChange>& h0 = histories[0];
  for (size_t r = 1; r < histories.size(); ++r) {
    ASSERT_EQ(histories[r].size(), h0.size()) << "rank " << r;
    for (size_t i = 0; i < h0.size(); ++i) {
      EXPECT_TRUE(histories[r][i] == h0[i])
          << "rank " << r << " switch " << i << " at list " << histories[r][i].list
          << " vs rank 0's at " << h0[i].list;
    }
  }
  for (size_t i = 1; i < h0.size(); ++i) EXPECT_GT(h0[i].list, h0[i - 1].list);
}

TEST(Autotune, RanksSwitchTogetherAndResultsStayExact) {
  const std::string log = ::testing::TempDir() + "autotune_e2e.csv";
  test::ClusterOptions options;
  options.adjust = [&](Settings* s) {
    s->autotune = true;
    s->autotune_log = log;
    s->autotune_warmup_samples = 1;
    s->autotune_steps_per_sample = 1;
    s->autotune_bayes_opt_max_samples = 6;
  };
  std::mutex mu;
  std::vector<std::vector<AutotuneChange>> histories(kRanks);
  test::runThreadRanks(
      kRanks,
      [&](Runtime& rt) {
        runSteps(rt, kSteps);
        std::lock_guard<std::mutex> lock(mu);
        histories[static_cast<size_t>(rt.rank())] = rt.autotuneHistory();
      },
      options);
  // 1 warm-up, 6 Bayesian samples and 1 with the cache off: 8 samples of 6
  // steps (5 sub-samples of 1 step, plus the step that closes the last).
  const std::vector<AutotuneChange>& h0 = histories[0];
  ASSERT_EQ(h0.size(), 7u);
  expectSameHistories(histories);
  EXPECT_TRUE(h0[5].params.active);
  EXPECT_FALSE(h0[5].params.switches & kSwitchResponseCache);  // the cache-off sample
  EXPECT_FALSE(h0.back().params.active);
  // The CSV: header, 7 scored samples, the best.
  std::ifstream in(log);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 7u + 1u);
  EXPECT_EQ(lines[0],
            "hierarchical_allreduce,hierarchical_allgather,cache_enabled,cycle_time_ms,"
            "tensor_fusion_threshold,score");
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(std::count(lines[i].begin(), lines[i].end(), ','), 5) << lines[i];
    EXPECT_GT(std::stod(lines[i].substr(lines[i].rfind(',') + 1)), 0) << lines[i];
  }
  std::remove(log.c_str());
}

// Two simulated hosts of two ranks: the hierarchical switches are tuned too
// (the numeric knobs are fixed here), one sample each at the value it is not
// at, and every allreduce stays exact whichever algorithm runs it.
TEST(Autotune, TunesTheHierarchicalSwitchesAcrossHosts) {
  const std::string log = ::testing::TempDir() + "autotune_hosts_e2e.csv";
  test::ClusterOptions options;
  options.ranks_per_host = 2;
  options.adjust = [&](Settings* s) {
    s->autotune = true;
    s->autotune_log = log;
    s->autotune_warmup_samples = 1;
    s->autotune_steps_per_sample = 1;
    s->from_env.insert("TUTTI_CYCLE_TIME_MS");
    s->from_env.insert("TUTTI_FUSION_THRESHOLD_BYTES");
  };
  std::mutex mu;
  std::vector<std::vector<AutotuneChange>> histories(4);
  test::runThreadRanks(
      4,
      [&](Runtime& rt) {
        runSteps(rt, 40);
        std::lock_guard<std::mutex> lock(mu);
        histories[static_cast<size_t>(rt.rank())] = rt.autotuneHistory();
      },
      options);
  // 1 warm-up, then the start values, hierarchical allreduce flipped,
  // hierarchical allgather flipped, the cache flipped: 4 changes.
  const std::vector<AutotuneChange>& h0 = histories[0];
  ASSERT_EQ(h0.size(), 4u);
  expectSameHistories(histories);
  const uint32_t all =
      kSwitchHierarchicalAllreduce | kSwitchHierarchicalAllgather | kSwitchResponseCache;
  EXPECT_EQ(h0[0].params.switches, all & ~kSwitchHierarchicalAllreduce);
  EXPECT_FALSE(h0[1].params.switches & kSwitchHierarchicalAllgather);
  EXPECT_FALSE(h0[2].params.switches & kSwitchResponseCache);
  EXPECT_FALSE(h0[3].params.active);
  std::ifstream in(log);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 4u + 1u);
  EXPECT_EQ(lines[1].substr(0, 6), "1,1,1,");  // the start values
  EXPECT_EQ(lines[2].substr(0, 6), "0,1,1,");  // hierarchical allreduce off
  std::remove(log.c_str());
}

}  // namespace
}  // namespace tutti

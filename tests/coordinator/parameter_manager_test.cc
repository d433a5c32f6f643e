// Autotune's state machine (coordinator/parameter_manager.h) with an
// injected clock: every step takes a time that is a known function of the
// parameters in force, so each sample's score is known exactly.

#include "coordinator/parameter_manager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace tutti {
namespace {

using Clock = ParameterManager::Clock;

constexpr int64_t kStepBytes = 1000000;

// Microseconds one step takes under `p`: best at cycle 0 and 24 MiB, the
// cache saves 200 us.
double stepMicros(const TunedParameters& p) {
  const double fusion = (static_cast<double>(p.fusion_threshold_bytes) / (1 << 20) - 24) / 64;
  const bool cache = (p.switches & kSwitchResponseCache) != 0;
  return 1000 + 20 * p.cycle_time_ms + 4000 * fusion * fusion + (cache ? 0 : 200);
}

std::vector<std::vector<double>> readCsv(const std::string& path, std::string* header) {
  std::ifstream in(path);
  std::getline(in, *header);
  std::vector<std::vector<double>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<double> row;
    std::stringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) row.push_back(std::stod(cell));
    rows.push_back(row);
  }
  return rows;
}

Settings autotuneSettings(const std::string& log) {
  Settings s;
  s.autotune = true;
  s.autotune_log = log;
  s.autotune_warmup_samples = 2;
  s.autotune_steps_per_sample = 2;
  s.autotune_bayes_opt_max_samples = 8;
  return s;
}

struct Trace {
  std::vector<int> changed_at;          // steps after which update() returned true
  std::vector<TunedParameters> points;  // the parameters of each step, in order
};

// Runs `steps` steps of two tensors, switching to current() when it changes.
Trace drive(ParameterManager* pm, int steps) {
  Trace run;
  Clock::time_point t{};
  TunedParameters p = pm->current();
  for (int k = 0; k < steps; ++k) {
    run.points.push_back(p);
    t += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::micro>(stepMicros(p)));
    if (pm->update({"grad.a", "grad.b"}, kStepBytes, t)) {
      run.changed_at.push_back(k);
      p = pm->current();
    }
  }
  return run;
}

TEST(ParameterManager, WarmsUpScoresEverySampleThenFixesTheBest) {
  const std::string log = ::testing::TempDir() + "autotune_state.csv";
  const Settings s = autotuneSettings(log);
  ParameterManager pm(s, Clock::time_point{}, /*seed=*/5);
  ASSERT_TRUE(pm.active());
  EXPECT_EQ(pm.current().fusion_threshold_bytes, s.fusion_threshold_bytes);
  const Trace run = drive(&pm, 400);
  // A sample is 5 sub-samples of 2 steps; the step that ends one sample also
  // ends the previous sub-sample's count, so a sample spans 11 updates. The
  // 2 warm-up samples change nothing.
  ASSERT_FALSE(run.changed_at.empty());
  EXPECT_EQ(run.changed_at[0], 3 * 11 - 1);
  for (size_t i = 1; i < run.changed_at.size(); ++i) {
    EXPECT_EQ(run.changed_at[i] - run.changed_at[i - 1], 11) << i;
  }
  // 8 Bayesian samples and 1 with the cache switched, then done.
  EXPECT_EQ(run.changed_at.size(), 9u);
  EXPECT_EQ(pm.scoredSamples(), 9);
  EXPECT_FALSE(pm.active());
  EXPECT_FALSE(pm.current().active);
  // The Bayesian stage starts at the configured values, then Horovod's first
  // test point (5 ms, 4 MiB).
  EXPECT_EQ(run.points[static_cast<size_t>(run.changed_at[0])].cycle_time_ms, 0);
  const TunedParameters second = run.points[static_cast<size_t>(run.changed_at[0] + 1)];
  EXPECT_EQ(second.cycle_time_ms, 5);
  EXPECT_EQ(second.fusion_threshold_bytes, 4 << 20);
  // The CSV: Horovod's columns, one row per scored sample with the score of
  // the parameters it ran (bytes per microsecond), then the best row.
  std::string header;
  const auto rows = readCsv(log, &header);
  EXPECT_EQ(header,
            "hierarchical_allreduce,hierarchical_allgather,cache_enabled,cycle_time_ms,"
            "tensor_fusion_threshold,score");
  ASSERT_EQ(rows.size(), 10u);
  double best = 0;
  for (size_t i = 0; i < 9; ++i) {
    const TunedParameters ran = run.points[static_cast<size_t>(run.changed_at[i])];
    ASSERT_EQ(rows[i].size(), 6u);
    // One host: the hierarchical switches stay at their start value (on).
    EXPECT_EQ(rows[i][0], 1) << i;
    EXPECT_EQ(rows[i][1], 1) << i;
    EXPECT_EQ(rows[i][2], (ran.switches & kSwitchResponseCache) ? 1 : 0) << i;
    EXPECT_NEAR(rows[i][3], ran.cycle_time_ms, 1e-9) << i;
    EXPECT_NEAR(rows[i][4], ran.fusion_threshold_bytes / double(1 << 20), 1e-4) << i;
    // The CSV shows 6 significant digits, as Horovod's.
    const double want = kStepBytes / stepMicros(ran);
    EXPECT_NEAR(rows[i][5], want, want * 1e-5) << i;
    best = std::max(best, rows[i][5]);
  }
  // The last sample tried the cache off (it was on), which costs 200 us.
  EXPECT_EQ(rows[8][2], 0);
  EXPECT_EQ(rows[9][2], 1);
  EXPECT_EQ(rows[9][5], best);
  EXPECT_NEAR(pm.bestScore(), best, best * 1e-5);
  EXPECT_NEAR(kStepBytes / stepMicros(pm.best()), best, best * 1e-5);
  // Fixed at the best from now on; the pinned text names every tuned knob.
  EXPECT_EQ(pm.current().fusion_threshold_bytes, pm.best().fusion_threshold_bytes);
  EXPECT_FALSE(drive(&pm, 50).changed_at.size());
  const std::string pin = pm.pinText();
  EXPECT_NE(
      pin.find("TUTTI_FUSION_THRESHOLD_BYTES=" + std::to_string(pm.best().fusion_threshold_bytes)),
      std::string::npos)
      << pin;
  EXPECT_NE(pin.find("TUTTI_CYCLE_TIME_MS="), std::string::npos) << pin;
  EXPECT_NE(pin.find("TUTTI_CACHE_CAPACITY=1024"), std::string::npos) << pin;
  std::remove(log.c_str());
}

// Step time with the hierarchical switches mattering: hierarchical
// allreduce saves 300 us, hierarchical allgather costs 100 us.
double hostsStepMicros(const TunedParameters& p) {
  return stepMicros(p) - ((p.switches & kSwitchHierarchicalAllreduce) ? 300 : 0) +
         ((p.switches & kSwitchHierarchicalAllgather) ? 100 : 0);
}

TEST(ParameterManager, TunesTheHierarchicalSwitchesOnSeveralHostsOnly) {
  const std::string log = ::testing::TempDir() + "autotune_hosts.csv";
  Settings s = autotuneSettings(log);
  s.size = 4;
  s.local_size = 2;
  s.cross_size = 2;
  s.from_env = {"TUTTI_CYCLE_TIME_MS", "TUTTI_FUSION_THRESHOLD_BYTES"};
  ParameterManager pm(s, Clock::time_point{});
  ASSERT_TRUE(pm.active());
  // Start: both on (auto), cache on; then one sample per switch flipped, in
  // Horovod's column order, each from the best so far.
  std::vector<TunedParameters> ran;
  Clock::time_point t{};
  for (int k = 0; k < 400 && pm.active(); ++k) {
    const TunedParameters p = pm.current();
    t += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::micro>(hostsStepMicros(p)));
    if (pm.update({"grad.a", "grad.b"}, kStepBytes, t)) ran.push_back(p);
  }
  ASSERT_EQ(ran.size(), 4u);
  const uint32_t all =
      kSwitchHierarchicalAllreduce | kSwitchHierarchicalAllgather | kSwitchResponseCache;
  EXPECT_EQ(ran[0].switches, all);
  EXPECT_EQ(ran[1].switches, all & ~kSwitchHierarchicalAllreduce);
  EXPECT_EQ(ran[2].switches, all & ~kSwitchHierarchicalAllgather);
  EXPECT_EQ(ran[3].switches, kSwitchHierarchicalAllreduce);  // cache off, from the best
  EXPECT_FALSE(pm.active());
  EXPECT_EQ(pm.best().switches, kSwitchHierarchicalAllreduce | kSwitchResponseCache);
  EXPECT_EQ(pm.pinText(),
            "TUTTI_HIERARCHICAL_ALLREDUCE=auto TUTTI_HIERARCHICAL_ALLGATHER=0 "
            "TUTTI_CACHE_CAPACITY=1024");
  std::string header;
  const auto rows = readCsv(log, &header);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[1][0], 0);  // the sample with hierarchical allreduce off
  EXPECT_EQ(rows[4][0], 1);
  EXPECT_EQ(rows[4][1], 0);
  std::remove(log.c_str());

  // Hosts of different sizes (5 ranks, 2 per host on rank 0's host), one
  // rank per host, or a switch set in the environment: not tuned.
  for (const auto& [size, local, cross] : {std::tuple{5, 2, 3}, {2, 1, 2}, {2, 2, 1}}) {
    s.size = size;
    s.local_size = local;
    s.cross_size = cross;
    ParameterManager fixed(s, Clock::time_point{});
    EXPECT_EQ(fixed.pinText(), "TUTTI_CACHE_CAPACITY=1024") << size << local << cross;
  }
  s.size = 4;
  s.local_size = 2;
  s.cross_size = 2;
  s.hierarchical_allgather = "0";
  s.from_env.insert("TUTTI_HIERARCHICAL_ALLGATHER");
  ParameterManager pinned(s, Clock::time_point{});
  EXPECT_EQ(pinned.current().switches, kSwitchHierarchicalAllreduce | kSwitchResponseCache);
  EXPECT_EQ(pinned.pinText(), "TUTTI_HIERARCHICAL_ALLREDUCE=auto TUTTI_CACHE_CAPACITY=1024");
}

TEST(ParameterManager, KnobsSetInTheEnvironmentStayFixed) {
  Settings s = autotuneSettings("");
  s.cycle_time_ms = 2.5;
  s.from_env = {"TUTTI_CYCLE_TIME_MS", "TUTTI_CACHE_CAPACITY"};
  ParameterManager pm(s, Clock::time_point{});
  const Trace run = drive(&pm, 400);
  EXPECT_EQ(run.changed_at.size(), 8u);  // the Bayesian stage only
  bool fusion_moved = false;
  for (const TunedParameters& p : run.points) {
    EXPECT_EQ(p.cycle_time_ms, 2.5);
    EXPECT_TRUE(p.switches & kSwitchResponseCache);
    fusion_moved = fusion_moved || p.fusion_threshold_bytes != s.fusion_threshold_bytes;
  }
  EXPECT_TRUE(fusion_moved);
  EXPECT_EQ(pm.pinText().find("TUTTI_CYCLE_TIME_MS"), std::string::npos) << pm.pinText();

  s.from_env.insert("TUTTI_FUSION_THRESHOLD_BYTES");
  ParameterManager none(s, Clock::time_point{});
  EXPECT_FALSE(none.active());
  EXPECT_TRUE(drive(&none, 100).changed_at.empty());
}

}  // namespace
}  // namespace tutti

namespace tutti {
namespace {

// The parameters travel in the ResponseList trailer; out-of-range values are
// malformed, not applied.
TEST(ParameterManager, TuningTravelsInTheResponseList) {
  ResponseList list;
  list.responses.resize(1);
  list.has_tuning = true;
  list.tuning.fusion_threshold_bytes = 3 << 20;
  list.tuning.cycle_time_ms = 2.25;
  list.tuning.switches = kSwitchResponseCache;
  list.tuning.active = true;
  ResponseList back;
  ASSERT_TRUE(deserialize(serialize(list), &back).isOk());
  EXPECT_TRUE(back.has_tuning);
  EXPECT_TRUE(back.tuning == list.tuning);
  ResponseList none;
  ASSERT_TRUE(deserialize(serialize(ResponseList{}), &none).isOk());
  EXPECT_FALSE(none.has_tuning);
  list.tuning.cycle_time_ms = -1;
  EXPECT_EQ(deserialize(serialize(list), &back).code(), StatusCode::kInvalidArgument);
  list.tuning.cycle_time_ms = 1;
  list.tuning.fusion_threshold_bytes = -5;
  EXPECT_EQ(deserialize(serialize(list), &back).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tutti

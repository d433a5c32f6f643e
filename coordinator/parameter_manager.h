#pragma once

// Autotune: rank 0's search for the fusion threshold, cycle time, response
// cache setting and hierarchical allreduce/allgather switches that move the
// most allreduce bytes per second, during the first steps of a job
// (TUTTI_AUTOTUNE=1; docs/autotune.md).
//
// Semantics follow Horovod 0.28.1's ParameterManager
// (horovod/common/parameter_manager.cc, HOROVOD_AUTOTUNE):
// - Scoring. update() is told the tensors of every executed response list and
//   their bytes. A sub-sample ends when some tensor has been seen
//   steps_per_sample more times (a "step" is one allreduce of each tensor);
//   its score is the bytes of the sub-sample divided by its wall-clock
//   microseconds. A sample is 5 sub-samples; its score is their median.
// - Warm-up. The first warmup_samples samples are discarded.
// - Stages, in order: (1) Bayesian optimisation (bayesian_optimization.h)
//   jointly over the numeric knobs, fusion threshold in MiB in [0, 64] and
//   cycle time in ms in [0, 100] (Horovod: [1, 100]; tutti's 0 means no
//   wait), first at test points (the configured values, then Horovod's
//   (4, 5), (32, 50), (16, 25), (8, 10)), then at the points of largest
//   expected improvement, bayes_opt_max_samples samples in all (without a
//   free numeric knob: one sample at the start values); (2) each
//   on/off knob of categoricalKnobs() in table order, one sample at the value
//   it is not at. A knob whose variable the environment set is fixed and
//   left out, as Horovod does; so is one that cannot change anything in this
//   job (the hierarchical switches on one host, with one rank per host or
//   with hosts of different sizes; the cache at capacity 0). Unlike Horovod (whose later stages run
//   at the first test point), every stage runs at the best values found so far.
// - End. The best-scoring sample's values become final; rank 0 logs them at
//   info as environment assignments to pin (pinText()).
// - Agreement. Only rank 0 tunes. Each change goes to every rank in the
//   next ResponseList (core/message.h, TunedParameters), and every rank
//   switches before executing that list (coordinator/background_loop.cc).
// - Log. With TUTTI_AUTOTUNE_LOG, a CSV with Horovod's columns for the knobs
//   tutti tunes (the on/off knobs' columns, cycle_time_ms,
//   tensor_fusion_threshold (MiB), score (bytes per microsecond)): one row per
//   scored sample, then a last row with the best values and score.
//
// Threading: owned by rank 0's background thread. The clock is passed in.

#include <array>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/bayesian_optimization.h"
#include "core/message.h"
#include "core/settings.h"

namespace tutti {

// TunedParameters::switches bits.
constexpr uint32_t kSwitchResponseCache = 1u << 0;
// On: the algorithm table may choose the hierarchical allreduce (allgather),
// as TUTTI_HIERARCHICAL_ALLREDUCE=auto (_ALLGATHER=auto); off: it declines
// it, as =0. The backend reads them through Backend::allowHierarchical.
constexpr uint32_t kSwitchHierarchicalAllreduce = 1u << 1;
constexpr uint32_t kSwitchHierarchicalAllgather = 1u << 2;

// An on/off knob. To tune another one: a bit above, and an entry in
// categoricalKnobs() (its consumer reads the bit from the live parameters).
struct CategoricalKnob {
  const char* column;   // the CSV column (Horovod's name)
  uint32_t bit;         // in TunedParameters::switches
  const char* setting;  // the variable that fixes it when the environment sets it
  // Whether the knob is on under `settings` (the start value).
  bool (*initial)(const Settings& settings);
  // Whether switching it can change anything in the job `settings` describe.
  bool (*applies)(const Settings& settings);
  // The environment assignment that pins `on` ("TUTTI_CACHE_CAPACITY=0").
  std::string (*pin)(bool on, const Settings& settings);
};
const std::vector<CategoricalKnob>& categoricalKnobs();

// A numeric knob of the Bayesian stage, in its search unit (MiB, ms); the
// box is [0, high].
struct NumericKnob {
  const char* column;   // the CSV column (Horovod's name)
  const char* setting;  // the variable that fixes it when the environment sets it
  double high;
  double (*get)(const TunedParameters& p);
  void (*set)(TunedParameters* p, double v);  // rounds to what is used and pinned
  std::string (*pin)(const TunedParameters& p);
};
const std::vector<NumericKnob>& numericKnobs();

// One switch, as every rank made it: before executing its `list`-th
// response list (counted from 1 on every rank).
struct AutotuneChange {
  int64_t list = 0;
  TunedParameters params;
  bool operator==(const AutotuneChange& o) const { return list == o.list && params == o.params; }
};

// The parameters as they are before any tuning: the settings' values.
TunedParameters initialParameters(const Settings& settings);

class ParameterManager {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes the knobs and TUTTI_AUTOTUNE_* from `settings`; `seed` seeds the
  // Bayesian optimiser. Opens settings.autotune_log (a failure is logged and
  // the CSV skipped). Active unless every knob is fixed.
  ParameterManager(const Settings& settings, Clock::time_point now, uint64_t seed = 1);

  // One executed response list: its allreduced tensor names and bytes.
  // Returns true when current() changed (a new sample point, or the end).
  bool update(const std::vector<std::string>& names, int64_t bytes, Clock::time_point now);

  bool active() const { return current_.active; }
  const TunedParameters& current() const { return current_; }
  const TunedParameters& best() const { return best_; }
  double bestScore() const { return best_score_; }
  int scoredSamples() const { return scored_; }
  // "TUTTI_FUSION_THRESHOLD_BYTES=... TUTTI_CYCLE_TIME_MS=... TUTTI_CACHE_CAPACITY=..."
  // for best(), every tuned knob.
  std::string pinText() const;

 private:
  static constexpr int kSubSamples = 5;  // Horovod's SAMPLES
  void resetSample(Clock::time_point now);
  bool tune(double score);
  void advance(double score);
  void startCategoricalStage();
  void finish();
  std::vector<double> numericPoint(const TunedParameters& p) const;
  TunedParameters withNumeric(TunedParameters p, const std::vector<double>& x) const;
  std::string rowText(const TunedParameters& p, double score) const;
  void logRow(const TunedParameters& p, double score);

  const Settings settings_;
  const int warmups_;
  const int steps_per_sample_;
  const int max_samples_;
  std::vector<const NumericKnob*> numeric_;          // the free numeric knobs
  std::vector<const CategoricalKnob*> categorical_;  // the free on/off knobs
  std::unique_ptr<BayesianOptimization> bayes_;
  std::vector<std::vector<double>> test_points_;
  int bayes_samples_ = 0;
  size_t stage_ = 0;  // 0: Bayesian; 1 + k: categorical_[k]
  int warmup_remaining_;
  int scored_ = 0;
  TunedParameters current_;
  TunedParameters best_;
  double best_score_ = -1;
  // The sample in progress.
  std::unordered_map<std::string, int> counts_;
  std::array<double, kSubSamples> scores_{};
  int sub_ = 0;
  int64_t bytes_ = 0;
  Clock::time_point sub_start_;
  std::ofstream csv_;
};

}  // namespace tutti

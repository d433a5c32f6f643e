#include "coordinator/parameter_manager.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/logging.h"

namespace tutti {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// Horovod's test points of the Bayesian stage after the configured values,
// in numericKnobs() order (cycle ms, fusion MiB).
const std::vector<std::vector<double>> kHorovodTestPoints = {{5, 4}, {50, 32}, {25, 16}, {10, 8}};

// A number as the CSV and the pinned assignments show it.
std::string show(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

bool cacheInitial(const Settings& s) {
  return s.cache_capacity > 0;
}
std::string cachePin(bool on, const Settings& s) {
  return "TUTTI_CACHE_CAPACITY=" + std::to_string(on ? std::max<int64_t>(s.cache_capacity, 1) : 0);
}

// As ops/algorithm_table.cc's hierarchical entries: several hosts holding
// several ranks each, as many on each (every rank has the same local size).
bool hierarchicalApplies(const Settings& s) {
  return s.cross_size > 1 && s.local_size > 1 && s.local_size * s.cross_size == s.size;
}
std::string hierarchicalPin(const char* setting, bool on) {
  return std::string(setting) + (on ? "=auto" : "=0");
}

}  // namespace

const std::vector<CategoricalKnob>& categoricalKnobs() {
  // Horovod's column order: hierarchical_allreduce, hierarchical_allgather,
  // torus_allreduce (tutti has none), cache_enabled.
  static const std::vector<CategoricalKnob> knobs = {
      {"hierarchical_allreduce", kSwitchHierarchicalAllreduce, "TUTTI_HIERARCHICAL_ALLREDUCE",
       [](const Settings& s) { return s.hierarchical_allreduce != "0"; }, hierarchicalApplies,
       [](bool on, const Settings&) {
         return hierarchicalPin("TUTTI_HIERARCHICAL_ALLREDUCE", on);
       }},
      {"hierarchical_allgather", kSwitchHierarchicalAllgather, "TUTTI_HIERARCHICAL_ALLGATHER",
       [](const Settings& s) { return s.hierarchical_allgather != "0"; }, hierarchicalApplies,
       [](bool on, const Settings&) {
         return hierarchicalPin("TUTTI_HIERARCHICAL_ALLGATHER", on);
       }},
      // A cache of capacity 0 cannot be switched on (nothing sizes it), so
      // the start value is also whether it applies.
      {"cache_enabled", kSwitchResponseCache, "TUTTI_CACHE_CAPACITY", cacheInitial, cacheInitial,
       cachePin},
  };
  return knobs;
}

const std::vector<NumericKnob>& numericKnobs() {
  // Horovod's column order: cycle_time_ms, tensor_fusion_threshold (MiB).
  static const std::vector<NumericKnob> knobs = {
      {"cycle_time_ms", "TUTTI_CYCLE_TIME_MS", 100,
       [](const TunedParameters& p) { return p.cycle_time_ms; },
       [](TunedParameters* p, double v) { p->cycle_time_ms = std::round(v * 100) / 100; },
       [](const TunedParameters& p) { return "TUTTI_CYCLE_TIME_MS=" + show(p.cycle_time_ms); }},
      {"tensor_fusion_threshold", "TUTTI_FUSION_THRESHOLD_BYTES", 64,
       [](const TunedParameters& p) {
         return static_cast<double>(p.fusion_threshold_bytes) / kMiB;
       },
       [](TunedParameters* p, double v) {
         p->fusion_threshold_bytes = static_cast<int64_t>(std::llround(v * kMiB));
       },
       [](const TunedParameters& p) {
         return "TUTTI_FUSION_THRESHOLD_BYTES=" + std::to_string(p.fusion_threshold_bytes);
       }},
  };
  return knobs;
}

TunedParameters initialParameters(const Settings& settings) {
  TunedParameters p;
  p.fusion_threshold_bytes = settings.fusion_threshold_bytes;
  p.cycle_time_ms = settings.cycle_time_ms;
  for (const CategoricalKnob& k : categoricalKnobs()) {
    if (k.initial(settings)) p.switches |= k.bit;
  }
  return p;
}

ParameterManager::ParameterManager(const Settings& settings, Clock::time_point now, uint64_t seed)
    : settings_(settings),
      warmups_(settings.autotune_warmup_samples),
      steps_per_sample_(std::max(1, settings.autotune_steps_per_sample)),
      max_samples_(std::max(1, settings.autotune_bayes_opt_max_samples)),
      warmup_remaining_(warmups_),
      current_(initialParameters(settings)) {
  std::vector<size_t> free_index;  // of numeric_ in numericKnobs()
  for (size_t j = 0; j < numericKnobs().size(); ++j) {
    const NumericKnob& k = numericKnobs()[j];
    if (settings.from_env.count(k.setting) != 0) continue;
    numeric_.push_back(&k);
    free_index.push_back(j);
  }
  for (const CategoricalKnob& k : categoricalKnobs()) {
    if (settings.from_env.count(k.setting) == 0 && k.applies(settings)) categorical_.push_back(&k);
  }
  if (!numeric_.empty()) {
    std::vector<std::pair<double, double>> bounds;
    for (const NumericKnob* k : numeric_) bounds.emplace_back(0.0, k->high);
    bayes_ = std::make_unique<BayesianOptimization>(bounds,
                                                    settings.autotune_gaussian_process_noise, seed);
    test_points_.push_back(numericPoint(current_));
    for (const std::vector<double>& full : kHorovodTestPoints) {
      std::vector<double> x;
      for (size_t j : free_index) x.push_back(full[j]);
      x = numericPoint(withNumeric(current_, x));  // rounded as used
      if (std::find(test_points_.begin(), test_points_.end(), x) == test_points_.end())
        test_points_.push_back(x);
    }
  }
  current_.active = !numeric_.empty() || !categorical_.empty();
  best_ = current_;
  if (!current_.active) {
    TUTTI_LOG(kWarning) << "autotune: every tuned knob is set in the environment; nothing to tune";
    return;
  }
  std::string tuned;
  for (const NumericKnob* k : numeric_)
    tuned += std::string(tuned.empty() ? "" : ", ") + k->setting;
  for (const CategoricalKnob* k : categorical_) {
    tuned += std::string(tuned.empty() ? "" : ", ") + k->column;
  }
  TUTTI_LOG(kInfo) << "autotune: tuning " << tuned << " (" << warmups_ << " warm-up samples, "
                   << steps_per_sample_ << " steps per sub-sample)";
  if (!settings.autotune_log.empty()) {
    csv_.open(settings.autotune_log, std::ios::out | std::ios::trunc);
    if (!csv_.good()) {
      TUTTI_LOG(kWarning) << "autotune: cannot write TUTTI_AUTOTUNE_LOG=" << settings.autotune_log;
    } else {
      for (const CategoricalKnob& k : categoricalKnobs()) csv_ << k.column << ",";
      for (const NumericKnob& k : numericKnobs()) csv_ << k.column << ",";
      csv_ << "score" << std::endl;
    }
  }
  resetSample(now);
}

void ParameterManager::resetSample(Clock::time_point now) {
  counts_.clear();
  sub_ = 0;
  bytes_ = 0;
  sub_start_ = now;
}

bool ParameterManager::update(const std::vector<std::string>& names, int64_t bytes,
                              Clock::time_point now) {
  if (!current_.active) return false;
  for (const std::string& name : names) {
    const int step = counts_[name]++;
    if (step >= (sub_ + 1) * steps_per_sample_) {
      const double us = std::chrono::duration<double, std::micro>(now - sub_start_).count();
      scores_[static_cast<size_t>(sub_)] = static_cast<double>(bytes_) / std::max(us, 1e-3);
      bytes_ = 0;
      sub_start_ = now;
      ++sub_;
      break;
    }
  }
  bytes_ += bytes;
  if (sub_ < kSubSamples) return false;
  std::array<double, kSubSamples> sorted = scores_;
  std::sort(sorted.begin(), sorted.end());
  const bool changed = tune(sorted[kSubSamples / 2]);
  resetSample(now);
  return changed;
}

bool ParameterManager::tune(double score) {
  if (warmup_remaining_ > 0) {
    --warmup_remaining_;
    TUTTI_LOG(kInfo) << "autotune: warming up (" << warmup_remaining_ << " remaining)";
    return false;
  }
  ++scored_;
  logRow(current_, score);
  if (score > best_score_) {
    best_score_ = score;
    best_ = current_;
  }
  advance(score);
  return true;
}

void ParameterManager::advance(double score) {
  // Without free numeric knobs the first stage is the one sample at the
  // start values, so that the on/off stage compares against them.
  if (stage_ == 0 && bayes_) {
    bayes_->addSample(numericPoint(current_), score);
    ++bayes_samples_;
    if (bayes_samples_ < max_samples_) {
      const size_t i = static_cast<size_t>(bayes_samples_);
      const std::vector<double> x =
          i < test_points_.size() ? test_points_[i] : bayes_->nextSample();
      current_ = withNumeric(best_, x);
      return;
    }
    stage_ = 1;
  } else {
    ++stage_;
  }
  startCategoricalStage();
}

void ParameterManager::startCategoricalStage() {
  const size_t k = stage_ - 1;
  if (k >= categorical_.size()) {
    finish();
    return;
  }
  current_ = best_;
  current_.switches ^= categorical_[k]->bit;  // the value it is not at
}

void ParameterManager::finish() {
  current_ = best_;
  current_.active = false;
  best_.active = false;
  TUTTI_LOG(kInfo) << "autotune: done after " << scored_ << " samples; best score "
                   << show(best_score_) << " bytes/us; pin it with " << pinText();
  if (csv_.is_open() && csv_.good()) csv_ << rowText(best_, best_score_) << std::endl;
}

std::vector<double> ParameterManager::numericPoint(const TunedParameters& p) const {
  std::vector<double> x;
  for (const NumericKnob* k : numeric_) x.push_back(std::clamp(k->get(p), 0.0, k->high));
  return x;
}

TunedParameters ParameterManager::withNumeric(TunedParameters p,
                                              const std::vector<double>& x) const {
  for (size_t i = 0; i < numeric_.size(); ++i) numeric_[i]->set(&p, x[i]);
  return p;
}

std::string ParameterManager::pinText() const {
  std::string out;
  for (const NumericKnob* k : numeric_) out += (out.empty() ? "" : " ") + k->pin(best_);
  for (const CategoricalKnob* k : categorical_) {
    out += (out.empty() ? "" : " ") + k->pin((best_.switches & k->bit) != 0, settings_);
  }
  return out;
}

std::string ParameterManager::rowText(const TunedParameters& p, double score) const {
  std::ostringstream row;
  for (const CategoricalKnob& k : categoricalKnobs()) row << ((p.switches & k.bit) ? 1 : 0) << ",";
  for (const NumericKnob& k : numericKnobs()) row << show(k.get(p)) << ",";
  row << show(score);
  return row.str();
}

void ParameterManager::logRow(const TunedParameters& p, double score) {
  const std::string row = rowText(p, score);
  TUTTI_LOG(kInfo) << "autotune: sample " << scored_ << " [" << row << "]";
  if (csv_.is_open() && csv_.good()) csv_ << row << std::endl;
}

}  // namespace tutti

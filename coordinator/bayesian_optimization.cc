#include "coordinator/bayesian_optimization.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace tutti {

namespace {

constexpr double kXi = 0.01;
constexpr int kCandidates = 2048;

double normalPdf(double z) {
  return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
}
double normalCdf(double z) {
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}

}  // namespace

BayesianOptimization::BayesianOptimization(std::vector<std::pair<double, double>> bounds,
                                           double noise, uint64_t seed)
    : bounds_(std::move(bounds)), rng_(seed), gp_(noise) {
  TUTTI_CHECK(!bounds_.empty());
  for (const auto& b : bounds_) TUTTI_CHECK(b.first <= b.second);
}

std::vector<double> BayesianOptimization::toUnit(const std::vector<double>& x) const {
  std::vector<double> u(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double span = bounds_[i].second - bounds_[i].first;
    u[i] = span > 0 ? (x[i] - bounds_[i].first) / span : 0;
  }
  return u;
}

std::vector<double> BayesianOptimization::fromUnit(const std::vector<double>& u) const {
  std::vector<double> x(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    x[i] = bounds_[i].first + u[i] * (bounds_[i].second - bounds_[i].first);
  }
  return x;
}

void BayesianOptimization::addSample(const std::vector<double>& x, double y) {
  TUTTI_CHECK_EQ(x.size(), bounds_.size());
  x_.push_back(x);
  y_.push_back(y);
}

double BayesianOptimization::eiUnit(const std::vector<double>& u) const {
  double mu = 0;
  double sigma = 0;
  gp_.predict(u, &mu, &sigma);
  if (sigma <= 0) return 0;
  const double imp = mu - incumbent_ - kXi;
  const double z = imp / sigma;
  return imp * normalCdf(z) + sigma * normalPdf(z);
}

double BayesianOptimization::expectedImprovement(const std::vector<double>& x) const {
  return eiUnit(toUnit(x));
}

std::vector<double> BayesianOptimization::nextSample() {
  TUTTI_CHECK(!x_.empty());
  // Standardised scores (Horovod: from 3 samples on).
  double mean = 0;
  double dev = 1;
  const size_t n = y_.size();
  if (n >= 3) {
    for (double y : y_) mean += y;
    mean /= static_cast<double>(n);
    double var = 0;
    for (double y : y_) var += (y - mean) * (y - mean);
    dev = std::sqrt(var / static_cast<double>(n));
    if (!(dev > 0)) dev = 1;
  }
  std::vector<std::vector<double>> units;
  std::vector<double> scores;
  for (size_t i = 0; i < n; ++i) {
    units.push_back(toUnit(x_[i]));
    scores.push_back((y_[i] - mean) / dev);
  }
  gp_.fit(units, scores);
  incumbent_ = -std::numeric_limits<double>::infinity();
  for (const auto& u : units) {
    double mu = 0;
    double sigma = 0;
    gp_.predict(u, &mu, &sigma);
    incumbent_ = std::max(incumbent_, mu);
  }
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> best(bounds_.size(), 0.0);
  double best_ei = -1;
  const auto consider = [&](const std::vector<double>& u) {
    const double ei = eiUnit(u);
    if (ei > best_ei) {
      best_ei = ei;
      best = u;
    }
  };
  for (int c = 0; c < kCandidates; ++c) {
    std::vector<double> u(bounds_.size());
    for (double& v : u) v = uniform(rng_);
    consider(u);
    for (size_t d = 0; d < u.size(); ++d) {
      std::vector<double> edge = u;
      edge[d] = 0;
      consider(edge);
      edge[d] = 1;
      consider(edge);
    }
  }
  return fromUnit(best);
}

}  // namespace tutti

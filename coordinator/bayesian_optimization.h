#pragma once

// Bayesian optimisation of a noisy score over a box, as autotune uses it
// (coordinator/parameter_manager.h): a Gaussian-process surrogate
// (coordinator/gaussian_process.h) of the samples seen so far, and the next
// point where the expected improvement is largest.
//
// Method (Brochu, Cora, de Freitas, "A Tutorial on Bayesian Optimization of
// Expensive Cost Functions", 2010, sections 2.3-2.4; Horovod's
// horovod/common/optim/bayesian_optimization.cc follows the same text):
// inputs are scaled to [0, 1] per dimension, scores are standardised (mean 0,
// deviation 1, once there are 3 or more), the GP is fitted, and
// EI(x) = (mu(x) - mu* - xi) Phi(z) + sigma(x) phi(z), z = (mu(x) - mu* - xi) / sigma(x),
// where mu* is the largest posterior mean at the samples (the noise-aware
// incumbent) and xi = 0.01. EI is maximised over 2048 candidates drawn
// uniformly from the box by a seeded std::mt19937_64 (Horovod: L-BFGS from
// 25 random starts), each also with every coordinate in turn moved to its
// lower and upper bound, so optima on the boundary (a cycle time of 0) are
// found exactly. The same seed and samples give the same proposal.
//
// Not thread-safe; one owner.

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "coordinator/gaussian_process.h"

namespace tutti {

class BayesianOptimization {
 public:
  // bounds: (low, high) per dimension, low <= high; noise: the GP's
  // observation noise in units of the standardised score.
  BayesianOptimization(std::vector<std::pair<double, double>> bounds, double noise,
                       uint64_t seed = 1);

  size_t dimensions() const { return bounds_.size(); }
  // Records the score `y` (higher is better) measured at `x` (in bounds units).
  void addSample(const std::vector<double>& x, double y);
  // The point to measure next, in bounds units. Needs one sample or more.
  std::vector<double> nextSample();
  // The expected improvement at `x` (bounds units) under the model fitted by
  // the last nextSample(); for tests.
  double expectedImprovement(const std::vector<double>& x) const;
  size_t samples() const { return x_.size(); }

 private:
  std::vector<double> toUnit(const std::vector<double>& x) const;
  std::vector<double> fromUnit(const std::vector<double>& u) const;
  double eiUnit(const std::vector<double>& u) const;

  std::vector<std::pair<double, double>> bounds_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> x_;  // bounds units
  std::vector<double> y_;
  GaussianProcess gp_;    // the model of the last nextSample(), on unit inputs
  double incumbent_ = 0;  // mu*: largest posterior mean at the samples
};

}  // namespace tutti

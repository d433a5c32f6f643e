#pragma once

// Gaussian-process regression with a squared-exponential (RBF) kernel, the
// surrogate model of autotune's Bayesian optimisation
// (coordinator/bayesian_optimization.h).
//
// Model (Rasmussen & Williams, "Gaussian Processes for Machine Learning",
// 2006, algorithm 2.1): k(a, b) = sigma_f^2 exp(-|a - b|^2 / (2 l^2)), one
// length scale l for every input dimension (isotropic, as Horovod's
// horovod/common/optim/gaussian_process.cc), observations y = f(x) + e with
// e ~ N(0, noise^2). fit() picks l and sigma_f that maximise the log marginal
// likelihood over a fixed log-spaced grid (Horovod runs L-BFGS from (1, 1);
// the grid is deterministic and enough for the few samples autotune takes).
// Inputs are used as given: the caller scales them (autotune: to [0, 1]).
//
// Sizes: n samples of d inputs; the O(n^3) Cholesky is for n up to a few
// hundred. Not thread-safe; one owner.

#include <cstddef>
#include <vector>

namespace tutti {

class GaussianProcess {
 public:
  // noise: standard deviation of the observation noise (>= 0; a jitter of
  // 1e-8 is always added to the diagonal).
  explicit GaussianProcess(double noise) : noise_(noise) {}

  // Conditions on samples x[i] (each of the same dimension d >= 1) with
  // values y[i]; x.size() == y.size() >= 1. Chooses the kernel parameters.
  void fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y);
  // Posterior mean and standard deviation of f at `point` (dimension d).
  // Before fit(): the prior (0, sigma_f).
  void predict(const std::vector<double>& point, double* mean, double* stddev) const;

  double lengthScale() const { return length_; }
  double signalStddev() const { return sigma_f_; }

 private:
  // Factorises K + noise^2 I for (length, sigma_f) and solves alpha; returns
  // the log marginal likelihood (-inf when K is not positive definite).
  double condition(double length, double sigma_f);
  double kernel(const std::vector<double>& a, const std::vector<double>& b) const;

  double noise_;
  double length_ = 1;
  double sigma_f_ = 1;
  std::vector<std::vector<double>> x_;
  std::vector<double> y_;
  std::vector<double> chol_;   // lower Cholesky factor L of K + noise^2 I, row-major n x n
  std::vector<double> alpha_;  // (K + noise^2 I)^-1 y
};

}  // namespace tutti

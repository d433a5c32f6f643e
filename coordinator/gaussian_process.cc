#include "coordinator/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace tutti {

namespace {

constexpr double kJitter = 1e-8;

// In place: a (n x n, row-major, symmetric) becomes its lower Cholesky
// factor. False when a is not positive definite.
bool cholesky(std::vector<double>* a, size_t n) {
  std::vector<double>& m = *a;
  for (size_t j = 0; j < n; ++j) {
    double d = m[j * n + j];
    for (size_t k = 0; k < j; ++k) d -= m[j * n + k] * m[j * n + k];
    if (!(d > 0)) return false;
    const double ljj = std::sqrt(d);
    m[j * n + j] = ljj;
    for (size_t i = j + 1; i < n; ++i) {
      double s = m[i * n + j];
      for (size_t k = 0; k < j; ++k) s -= m[i * n + k] * m[j * n + k];
      m[i * n + j] = s / ljj;
    }
    for (size_t k = j + 1; k < n; ++k) m[j * n + k] = 0;
  }
  return true;
}

// Solves L v = b (forward substitution), L lower triangular n x n.
std::vector<double> solveLower(const std::vector<double>& l, size_t n, std::vector<double> b) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < i; ++k) b[i] -= l[i * n + k] * b[k];
    b[i] /= l[i * n + i];
  }
  return b;
}

// Solves L^T v = b (back substitution).
std::vector<double> solveUpper(const std::vector<double>& l, size_t n, std::vector<double> b) {
  for (size_t i = n; i-- > 0;) {
    for (size_t k = i + 1; k < n; ++k) b[i] -= l[k * n + i] * b[k];
    b[i] /= l[i * n + i];
  }
  return b;
}

}  // namespace

double GaussianProcess::kernel(const std::vector<double>& a, const std::vector<double>& b) const {
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]);
  return sigma_f_ * sigma_f_ * std::exp(-0.5 * d2 / (length_ * length_));
}

double GaussianProcess::condition(double length, double sigma_f) {
  length_ = length;
  sigma_f_ = sigma_f;
  const size_t n = x_.size();
  chol_.assign(n * n, 0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) chol_[i * n + j] = kernel(x_[i], x_[j]);
    chol_[i * n + i] += noise_ * noise_ + kJitter;
  }
  if (!cholesky(&chol_, n)) return -std::numeric_limits<double>::infinity();
  alpha_ = solveUpper(chol_, n, solveLower(chol_, n, y_));
  // log p(y | X) = -y^T alpha / 2 - sum log L_ii - n/2 log 2 pi (R&W eq. 2.30)
  double fit = 0;
  for (size_t i = 0; i < n; ++i) fit += y_[i] * alpha_[i];
  double log_det = 0;
  for (size_t i = 0; i < n; ++i) log_det += std::log(chol_[i * n + i]);
  return -0.5 * fit - log_det - 0.5 * static_cast<double>(n) * std::log(2 * M_PI);
}

void GaussianProcess::fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  TUTTI_CHECK(!x.empty() && x.size() == y.size());
  x_ = x;
  y_ = y;
  double best = -std::numeric_limits<double>::infinity();
  double best_length = 1;
  double best_sigma = 1;
  // Length scales 0.05 .. 2 and signal deviations 0.25 .. 4, log-spaced.
  for (int li = 0; li <= 16; ++li) {
    const double length = 0.05 * std::pow(40.0, li / 16.0);
    for (int si = 0; si <= 8; ++si) {
      const double sigma = 0.25 * std::pow(16.0, si / 8.0);
      const double ll = condition(length, sigma);
      if (ll > best) {
        best = ll;
        best_length = length;
        best_sigma = sigma;
      }
    }
  }
  condition(best_length, best_sigma);
}

void GaussianProcess::predict(const std::vector<double>& point, double* mean,
                              double* stddev) const {
  const size_t n = x_.size();
  if (n == 0 || chol_.size() != n * n) {
    *mean = 0;
    *stddev = sigma_f_;
    return;
  }
  std::vector<double> ks(n);
  for (size_t i = 0; i < n; ++i) ks[i] = kernel(x_[i], point);
  double mu = 0;
  for (size_t i = 0; i < n; ++i) mu += ks[i] * alpha_[i];
  const std::vector<double> v = solveLower(chol_, n, ks);
  double var = sigma_f_ * sigma_f_;
  for (double e : v) var -= e * e;
  *mean = mu;
  *stddev = std::sqrt(std::max(var, 0.0));
}

}  // namespace tutti

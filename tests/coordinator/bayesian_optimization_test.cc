// The Gaussian process and the Bayesian optimiser of autotune
// (coordinator/gaussian_process.h, coordinator/bayesian_optimization.h) on
// functions whose optimum is known; the optimiser's RNG is seeded, so every
// run proposes the same points.

#include "coordinator/bayesian_optimization.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "coordinator/gaussian_process.h"

namespace tutti {
namespace {

// Without noise the posterior mean interpolates the samples, and its
// deviation vanishes there; far away it returns to the prior (0, sigma_f).
TEST(GaussianProcess, InterpolatesNoiselessSamples) {
  GaussianProcess gp(0.0);
  const std::vector<std::vector<double>> x = {{0.0}, {0.3}, {0.6}, {1.0}};
  std::vector<double> y;
  for (const auto& p : x) y.push_back(std::sin(4 * p[0]));
  gp.fit(x, y);
  for (size_t i = 0; i < x.size(); ++i) {
    double mean = 0;
    double dev = 0;
    gp.predict(x[i], &mean, &dev);
    EXPECT_NEAR(mean, y[i], 1e-3) << "at " << x[i][0];
    EXPECT_LT(dev, 1e-2);
  }
  double mean = 0;
  double dev = 0;
  gp.predict({0.45}, &mean, &dev);
  EXPECT_NEAR(mean, std::sin(4 * 0.45), 0.1);  // smooth in between
  gp.predict({50.0}, &mean, &dev);
  EXPECT_NEAR(mean, 0.0, 1e-6);
  EXPECT_NEAR(dev, gp.signalStddev(), 1e-6);
}

// Runs `budget` rounds of propose-and-measure on f over `bounds`, starting
// from `start`; returns the best point measured.
std::vector<double> optimise(const std::function<double(const std::vector<double>&)>& f,
                             const std::vector<std::pair<double, double>>& bounds,
                             std::vector<double> start, int budget, double noise) {
  BayesianOptimization bo(bounds, noise, /*seed=*/7);
  std::vector<double> x = start;
  std::vector<double> best = x;
  double best_y = -1e300;
  for (int i = 0; i < budget; ++i) {
    const double y = f(x);
    if (y > best_y) {
      best_y = y;
      best = x;
    }
    bo.addSample(x, y);
    x = bo.nextSample();
    for (size_t d = 0; d < x.size(); ++d) {
      EXPECT_GE(x[d], bounds[d].first);
      EXPECT_LE(x[d], bounds[d].second);
    }
  }
  return best;
}

TEST(BayesianOptimization, FindsTheMaximumOfA1DFunction) {
  // One peak at 7.3 in [0, 20]; started at the far end.
  const auto f = [](const std::vector<double>& x) {
    return std::exp(-0.5 * std::pow((x[0] - 7.3) / 2.0, 2));
  };
  const std::vector<double> best = optimise(f, {{0, 20}}, {20}, 12, 0.05);
  EXPECT_NEAR(best[0], 7.3, 1.0);
}

TEST(BayesianOptimization, FindsTheMaximumOfA2DFunctionOnTheBoundary) {
  // Like autotune's score: best at cycle time 0 and a fusion threshold of
  // 24 MiB, falling off with both.
  const auto f = [](const std::vector<double>& x) {
    const double cycle = x[0] / 100;
    const double fusion = (x[1] - 24) / 64;
    return 10 - 6 * cycle - 20 * fusion * fusion;
  };
  const std::vector<double> best = optimise(f, {{0, 100}, {0, 64}}, {50, 4}, 20, 0.1);
  EXPECT_LT(best[0], 5.0);
  EXPECT_NEAR(best[1], 24, 6.0);
  EXPECT_GT(f(best), 10 - 0.4);
}

TEST(BayesianOptimization, SameSeedAndSamplesProposeTheSamePoint) {
  BayesianOptimization a({{0, 1}, {0, 1}}, 0.8, 3);
  BayesianOptimization b({{0, 1}, {0, 1}}, 0.8, 3);
  for (auto* bo : {&a, &b}) {
    bo->addSample({0.1, 0.2}, 1.0);
    bo->addSample({0.8, 0.5}, 2.0);
    bo->addSample({0.4, 0.9}, 1.5);
  }
  EXPECT_EQ(a.nextSample(), b.nextSample());
  // Expected improvement is non-negative everywhere and largest near the
  // best sample's side, not at the worst one.
  EXPECT_GE(a.expectedImprovement({0.1, 0.2}), 0.0);
  EXPECT_GT(a.expectedImprovement({0.9, 0.5}), a.expectedImprovement({0.1, 0.2}));
}

}  // namespace
}  // namespace tutti

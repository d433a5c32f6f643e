#pragma once

// Residual store for error feedback (Seide et al. 2014, "1-Bit Stochastic
// Gradient Descent"; Karimireddy et al. 2019, "Error Feedback Fixes SignSGD";
// Lin et al. 2018, "Deep Gradient Compression"): per tensor name, what the
// compressor has not sent yet. A compressor adds it to the next gradient of
// the same name and keeps the new remainder, so nothing is lost, only delayed.
//
// Shapes: one float32 vector of `count` elements per name. A residual whose
// element count differs from the current call's is reset to zeros (the tensor
// changed shape). Threading: not thread-safe; owned by one Compressor, used by
// the background thread only.

#include <cstddef>
#include <string>
#include <vector>

#include "compression/compressor.h"

namespace tutti {

class ResidualStore {
 public:
  // The residual for `name`, of exactly `count` elements: the stored one, or
  // zeros when there was none or its size differed.
  std::vector<float>& residualFor(const std::string& name, size_t count);

  const ResidualMap& all() const { return residuals_; }
  void set(ResidualMap residuals) { residuals_ = std::move(residuals); }
  void clear() { residuals_.clear(); }

 private:
  ResidualMap residuals_;
};

}  // namespace tutti

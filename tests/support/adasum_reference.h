#pragma once

// Adasum evaluated directly, in double precision, without tutti: the ranks'
// vectors are combined pairwise up a binary tree, (0,1), (2,3), ... first,
// then the results of (0,1) and (2,3), and so on, each pair as
//   a' = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// with a coefficient of 1 for a vector whose |v|^2 < sqrt(DBL_MIN), about
// 1.49e-154 (Horovod's guard, horovod/common/ops/adasum/adasum.h).
// (Maleki et al., MLSys 2021; the pairing of Horovod's vector-halving,
// distance-doubling implementation and of its test reference.)

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <vector>

namespace tutti {
namespace adasum_reference {

inline std::vector<double> combine(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double zero = std::sqrt(DBL_MIN);
  const double ca = aa >= zero ? 1 - dot / (2 * aa) : 1;
  const double cb = bb >= zero ? 1 - dot / (2 * bb) : 1;
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// per_rank[r]: rank r's vector; the number of ranks is a power of two.
inline std::vector<double> tree(std::vector<std::vector<double>> per_rank) {
  while (per_rank.size() > 1) {
    std::vector<std::vector<double>> next;
    for (size_t i = 0; i + 1 < per_rank.size(); i += 2) {
      next.push_back(combine(per_rank[i], per_rank[i + 1]));
    }
    per_rank = std::move(next);
  }
  return per_rank[0];
}

}  // namespace adasum_reference
}  // namespace tutti

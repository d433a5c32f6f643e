#pragma once

// Helpers for the compression tests: random gradients and a simulated
// exchange of compressed buffers between N "ranks" in one thread (what the
// executor does around Backend::allreduce / allgatherv, without a network).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compression/compressor.h"
#include "compression/compressor_factory.h"
#include "ops/reduce.h"

namespace tutti::testing {

// Gaussian values with magnitudes spread over several orders (like gradients).
inline std::vector<float> randomGradient(size_t count, uint32_t seed, float mean = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-6.0f, 2.0f);
  std::vector<float> g(count);
  for (auto& x : g) x = mean + normal(gen) * std::pow(10.0f, exponent(gen));
  return g;
}

inline std::unique_ptr<Compressor> makeOrDie(const std::string& spec) {
  std::unique_ptr<Compressor> c;
  const Status st = makeCompressor(spec, &c);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return c;
}

// Runs one compressed allreduce (sum) of inputs[r] (float32, `count` each)
// over inputs.size() simulated ranks, each with its own compressor from
// `compressors`, the way the executor will. Returns each rank's result.
inline std::vector<std::vector<float>> simulateCompressedSum(
    const std::vector<std::unique_ptr<Compressor>>& compressors,
    const std::vector<std::vector<float>>& inputs, size_t count, const std::string& name) {
  const size_t ranks = inputs.size();
  std::vector<std::vector<uint8_t>> packed(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    const Status st =
        compressors[r]->compress(inputs[r].data(), count, DataType::kFloat32, name, &packed[r]);
    EXPECT_TRUE(st.isOk()) << st.toString();
    EXPECT_EQ(packed[r].size(), compressors[r]->packedBytes(count));
  }
  std::vector<std::vector<float>> results(ranks, std::vector<float>(count, 0.0f));
  if (compressors[0]->exchangeKind() == ExchangeKind::kAllreduce) {
    // The ring's reduction: wire-dtype adds (in float32, rounded back), in
    // ring order; every rank ends with the same bytes.
    const DataType wire = compressors[0]->wireDType(DataType::kFloat32);
    std::vector<uint8_t> reduced = packed[0];
    for (size_t r = 1; r < ranks; ++r) {
      reduceInto(reduced.data(), packed[r].data(), count, wire, ReduceOp::kSum);
    }
    for (size_t r = 0; r < ranks; ++r) {
      const Status st = compressors[r]->decompress(reduced.data(), reduced.size(),
                                                   results[r].data(), count, DataType::kFloat32);
      EXPECT_TRUE(st.isOk()) << st.toString();
    }
  } else {
    // allgatherv: every rank's chunk in rank order, then a local sum.
    const size_t chunk = compressors[0]->packedBytes(count);
    std::vector<uint8_t> gathered;
    for (const auto& p : packed) gathered.insert(gathered.end(), p.begin(), p.end());
    for (size_t r = 0; r < ranks; ++r) {
      for (size_t src = 0; src < ranks; ++src) {
        const Status st = compressors[r]->accumulate(gathered.data() + src * chunk, chunk,
                                                     results[r].data(), count);
        EXPECT_TRUE(st.isOk()) << st.toString();
      }
    }
  }
  return results;
}

}  // namespace tutti::testing

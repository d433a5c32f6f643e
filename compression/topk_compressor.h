#pragma once

// Top-k sparsification with error feedback (Lin et al., "Deep Gradient
// Compression", ICLR 2018; Stich et al., "Sparsified SGD with Memory",
// NeurIPS 2018). Each step, for a tensor `name` with residual r (zeros at
// first): acc = gradient + r; send the k entries of acc with the largest
// magnitudes as (index, value) pairs; r = acc with the sent entries zeroed.
// Over many steps the sum of what was sent equals the sum of the gradients
// minus the current residual, which stays bounded (tests check both).
// A sent entry leaves acc - float16(acc) in the residual (see below).
//
// k = 0 for count 0; otherwise k = min(count, max(1, ceil(ratio * count))),
// with ceil taken after removing a 1e-9 relative excess so that decimal ratios
// do not round up (0.07 * 100 gives 7, not 8). Selection: exactly the k
// largest |acc|; equal magnitudes at the boundary go to the lower indices
// (deterministic). NaN counts as an infinite magnitude (it is sent, and so
// shows up in the result as it would uncompressed).
//
// Sparsity warm-up ("topk:<ratio>:warmup=N"; Lin et al. 2018, section 3.3:
// sparsity rises exponentially 75 % -> 99.9 % over the first epochs, so that
// early, fast-changing gradients are not held back). The n-th compress() of a
// tensor name (n = 0, 1, ...) keeps the ratio
//   r_n = r0 * (ratio / r0)^(n / N) for n < N, else ratio;  r0 = max(ratio, 0.25)
// (25 % kept at first, DGC's first stage). N = 0: always `ratio`. The count
// is per name and deterministic: every rank compresses a name the same number
// of times (allreduce is collective), so all ranks pick the same k. It
// restarts with the name's residual when the element count changes;
// setResiduals()/clearResiduals() (an elastic restore, made on every rank)
// end the warm-up of every name, so that ranks with different histories
// agree again. packedBytes(count) is the size after the warm-up; during it
// chunks are larger (packedBytesAt(n, count)), the same on every rank.
//
// Values travel as float16: what float16 cannot carry (the rounding error,
// below 2^-11 relative; the excess of a finite value beyond +-65504, which is
// sent saturated) stays in the residual, so error feedback makes up for it in
// later steps. A non-finite value is sent as inf/NaN and leaves no residual.
//
// Exchange: kAllgather. Chunk layout (compression/packed_format.h header,
// then): u32 index[k], strictly increasing, < count; f16 value[k].
// packedBytes(count) = 16 + 6k: 1 % keeps 0.06 bytes per element against
// float32's 4 (67x fewer; on the wire an allgather of n chunks against a ring
// allreduce, 2(n-1)/n * 4 bytes per element vs (n-1) * 0.06: 33x at n = 4).
// accumulate() adds each pair into a float32 dense buffer.
//
// dtypes: float16, bfloat16, float32, float64 (acc and residual in float32).
// count must be < 2^32 (indices are u32): kInvalidArgument otherwise.
// Cost: O(count) per step (std::nth_element on a scratch copy of the
// magnitudes, then two linear passes); scratch of 4 bytes per element, kept.
// Threading: one thread at a time (the background thread).

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "compression/compressor.h"
#include "compression/error_feedback.h"

namespace tutti {

class TopKCompressor : public Compressor {
 public:
  // ratio in (0, 1] (makeCompressor validates; anything else here is a bug);
  // warmup: steps of sparsity warm-up per tensor name (0: none).
  explicit TopKCompressor(double ratio, uint32_t warmup = 0);

  // The k for `count` elements at `ratio` (see above).
  static size_t selectCount(double ratio, size_t count);

  // The ratio kept by the n-th compress() of a name (see warm-up above).
  double ratioAt(uint64_t n) const;
  // Exact chunk size of the n-th compress() of a name with `count` elements.
  size_t packedBytesAt(uint64_t n, size_t count) const;

  double ratio() const { return ratio_; }
  std::string spec() const override;
  ExchangeKind exchangeKind() const override { return ExchangeKind::kAllgather; }
  bool appliesTo(DataType dtype) const override;
  DataType wireDType(DataType /*dtype*/) const override { return DataType::kUInt8; }
  size_t packedBytes(size_t count) const override;
  Status compress(const void* input, size_t count, DataType dtype, const std::string& name,
                  std::vector<uint8_t>* out) override;
  Status decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                    DataType dtype) const override;
  Status accumulate(const uint8_t* packed, size_t bytes, float* dense_out,
                    size_t count) const override;

  const ResidualMap& residuals() const override { return residuals_.all(); }
  void setResiduals(ResidualMap residuals) override;
  void clearResiduals() override;

 private:
  double ratio_;
  uint32_t warmup_;
  bool warmup_over_ = false;  // set by a restore
  struct WarmupCount {
    size_t count = 0;    // the name's element count when counting started
    uint64_t calls = 0;  // compress() calls of the name since then
  };
  std::unordered_map<std::string, WarmupCount> steps_;
  ResidualStore residuals_;
  std::vector<float> scratch_;  // magnitudes for nth_element; converted input
};

}  // namespace tutti

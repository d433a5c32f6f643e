#pragma once

// fp16 / bf16 cast compression (Horovod's Compression.fp16; PyTorch DDP's
// fp16_compress_hook / bf16_compress_hook). Exchanged by allreduce in the
// 16-bit type; the ring's float16/bfloat16 reduction adds in float32 and
// rounds back after each add (ops/reduce.h).
//
// Shapes/dtypes: input `count` float32 or float64 elements; wire buffer
// `count` float16 or bfloat16 elements (2 * count bytes); decompress writes
// `count` elements of the input dtype. Stateless (no error feedback: the
// rounding error is relative, not a bias).
//
// Error bound of one round trip, for a value x in the 16-bit type's normal
// range, rounding to nearest even: |x - rt(x)| <= 2^-11 |x| (fp16),
// 2^-8 |x| (bf16); float64 inputs round to float32 first, which adds at most
// 2^-24 |x|. fp16 overflows to +-inf above 65504 (prescale to avoid it); below
// 2^-14 it is subnormal and the bound is absolute (2^-25). bf16 has float32's
// range. NaN stays NaN.
//
// Threading: stateless, but used like every Compressor by one thread.

#include "compression/compressor.h"

namespace tutti {

class CastCompressor : public Compressor {
 public:
  // `wire` is DataType::kFloat16 or DataType::kBFloat16 (anything else: a
  // bug). `cross_host`: cast only what crosses hosts ("fp16:cross_host"):
  // the executor asks the backend for allreduceCastAcrossHosts (float32
  // within a host, `wire` across; ops/backend.h) and casts the whole buffer
  // only where the backend cannot.
  explicit CastCompressor(DataType wire, bool cross_host = false);

  std::string spec() const override;
  ExchangeKind exchangeKind() const override { return ExchangeKind::kAllreduce; }
  bool appliesTo(DataType dtype) const override;
  DataType wireDType(DataType /*dtype*/) const override { return wire_; }
  bool crossHostOnly() const override { return cross_host_; }
  size_t packedBytes(size_t count) const override { return count * 2; }
  Status compress(const void* input, size_t count, DataType dtype, const std::string& name,
                  std::vector<uint8_t>* out) override;
  Status decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                    DataType dtype) const override;

 private:
  DataType wire_;
  bool cross_host_;
};

}  // namespace tutti

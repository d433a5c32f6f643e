#pragma once

// "none": applies to no dtype, so the executor never calls compress(); the
// methods still work (identity on the bytes) so that a caller that does call
// them gets the uncompressed result. Stateless.

#include "compression/compressor.h"

namespace tutti {

class NoneCompressor : public Compressor {
 public:
  std::string spec() const override { return "none"; }
  ExchangeKind exchangeKind() const override { return ExchangeKind::kAllreduce; }
  bool appliesTo(DataType /*dtype*/) const override { return false; }
  // The input's own dtype: the "wire" buffer is the input unchanged.
  DataType wireDType(DataType dtype) const override { return dtype; }
  // Unknown without a dtype; identity copies are sized by compress().
  size_t packedBytes(size_t /*count*/) const override { return 0; }
  Status compress(const void* input, size_t count, DataType dtype, const std::string& name,
                  std::vector<uint8_t>* out) override;
  Status decompress(const uint8_t* packed, size_t bytes, void* output, size_t count,
                    DataType dtype) const override;
};

}  // namespace tutti

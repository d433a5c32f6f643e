#include "coordinator/compressed_allreduce.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "coordinator/op_arithmetic.h"
#include "core/check.h"
#include "ops/reduce.h"

namespace tutti {

namespace {

// Where tensor i's contribution starts: the caller's input when it needs no
// scaling, else a prescaled copy (or zeros for a joined rank) in `staging`.
const void* stagedInput(const TensorEntry* e, size_t count, DataType dtype, double prescale,
                        uint8_t* staging) {
  const size_t bytes = count * dataTypeSize(dtype);
  if (e == nullptr) {
    std::memset(staging, 0, bytes);
    return staging;
  }
  TUTTI_CHECK_EQ(static_cast<int64_t>(count), e->input.numElements());
  if (prescale == 1.0) return e->input.data;
  if (bytes > 0) std::memcpy(staging, e->input.data, bytes);
  scaleInPlace(staging, count, dtype, prescale);
  return staging;
}

// Each tensor's slice of the reduced `reduced` (r.dtype) into its output, postscaled.
Status copyOutputs(const Response& r, const std::vector<const TensorEntry*>& entries,
                   const uint8_t* reduced) {
  const size_t elem = dataTypeSize(r.dtype);
  size_t offset = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    const size_t count = static_cast<size_t>(r.sizes[i]);
    if (entries[i] != nullptr && count > 0) {
      std::memcpy(entries[i]->output.data, reduced + offset * elem, count * elem);
      scaleInPlace(entries[i]->output.data, count, r.dtype, r.postscale);
    }
    offset += count;
  }
  return Status::ok();
}

Status castAllreduce(const Response& r, const std::vector<const TensorEntry*>& entries,
                     Compressor& compressor, Backend& backend, int size,
                     CompressionScratch* scratch) {
  const size_t elem = dataTypeSize(r.dtype);
  const size_t total =
      static_cast<size_t>(std::accumulate(r.sizes.begin(), r.sizes.end(), int64_t{0}));
  // Average: divide before the 16-bit sum, so that it stays in range.
  const double pre = r.prescale * averageFactor(r, size);
  const void* input = nullptr;
  if (r.names.size() == 1) {
    input = stagedInput(entries[0], total, r.dtype, pre, scratch->staging.reserve(total * elem));
  } else {
    uint8_t* buf = scratch->staging.reserve(total * elem);
    size_t offset = 0;
    for (size_t i = 0; i < r.names.size(); ++i) {
      const size_t count = static_cast<size_t>(r.sizes[i]);
      uint8_t* dst = buf + offset * elem;
      const void* src = stagedInput(entries[i], count, r.dtype, pre, dst);
      if (src != dst && count > 0) std::memcpy(dst, src, count * elem);
      offset += count;
    }
    input = buf;
  }
  if (compressor.crossHostOnly()) {
    bool ran = false;
    scratch->packed.resize(total * elem);
    TUTTI_RETURN_IF_ERROR(backend.allreduceCastAcrossHosts(input, scratch->packed.data(), total,
                                                           r.dtype, ReduceOp::kSum,
                                                           compressor.wireDType(r.dtype), &ran));
    if (ran) return copyOutputs(r, entries, scratch->packed.data());
  }
  TUTTI_RETURN_IF_ERROR(compressor.compress(
      input, total, r.dtype, tensorKey(r.process_set, r.names[0]), &scratch->packed));
  TUTTI_RETURN_IF_ERROR(backend.allreduce(scratch->packed.data(), total,
                                          compressor.wireDType(r.dtype), ReduceOp::kSum));
  const size_t wire_elem = dataTypeSize(compressor.wireDType(r.dtype));
  size_t offset = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    const size_t count = static_cast<size_t>(r.sizes[i]);
    if (entries[i] != nullptr) {
      void* out = entries[i]->output.data;
      TUTTI_RETURN_IF_ERROR(compressor.decompress(scratch->packed.data() + offset * wire_elem,
                                                  count * wire_elem, out, count, r.dtype));
      scaleInPlace(out, count, r.dtype, r.postscale);
    }
    offset += count;
  }
  return Status::ok();
}

Status gatherAllreduce(const Response& r, const std::vector<const TensorEntry*>& entries,
                       Compressor& compressor, CompressorSet& compressors, Backend& backend,
                       int size, CompressionScratch* scratch) {
  const size_t elem = dataTypeSize(r.dtype);
  const size_t n = r.names.size();
  // Chunk sizes are what compress() produced: the same on every rank (they
  // depend on the count, the spec and, during a top-k warm-up, the number of
  // earlier steps of the name, which every rank shares).
  std::vector<size_t> chunk_bytes(n);
  const size_t largest = static_cast<size_t>(*std::max_element(r.sizes.begin(), r.sizes.end()));
  uint8_t* staging = scratch->staging.reserve(largest * elem);
  scratch->packed.clear();
  {
    std::unique_lock<std::mutex> state = compressors.lockState();
    for (size_t i = 0; i < n; ++i) {
      const size_t count = static_cast<size_t>(r.sizes[i]);
      const void* input = stagedInput(entries[i], count, r.dtype, r.prescale, staging);
      TUTTI_RETURN_IF_ERROR(compressor.compress(
          input, count, r.dtype, tensorKey(r.process_set, r.names[i]), &scratch->chunk));
      chunk_bytes[i] = scratch->chunk.size();
      scratch->packed.insert(scratch->packed.end(), scratch->chunk.begin(), scratch->chunk.end());
    }
  }
  const size_t per_rank = scratch->packed.size();
  scratch->gathered.resize(per_rank * static_cast<size_t>(size));
  TUTTI_RETURN_IF_ERROR(backend.allgatherv(scratch->packed.data(), scratch->gathered.data(),
                                           std::vector<size_t>(size, per_rank)));
  const double post = outputScale(r, size);
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t count = static_cast<size_t>(r.sizes[i]);
    const TensorEntry* e = entries[i];
    if (e != nullptr) {
      // float32 outputs are summed in place; other dtypes through `dense`.
      const bool direct = r.dtype == DataType::kFloat32;
      if (!direct) scratch->dense.resize(count);
      float* dense = direct ? static_cast<float*>(e->output.data) : scratch->dense.data();
      std::fill_n(dense, count, 0.0f);
      for (int p = 0; p < size; ++p) {
        const uint8_t* chunk =
            scratch->gathered.data() + static_cast<size_t>(p) * per_rank + offset;
        TUTTI_RETURN_IF_ERROR(compressor.accumulate(chunk, chunk_bytes[i], dense, count));
      }
      if (!direct) fromFloat32(dense, count, r.dtype, e->output.data);
      scaleInPlace(e->output.data, count, r.dtype, post);
    }
    offset += chunk_bytes[i];
  }
  return Status::ok();
}

// kQuantisedRing: the fused group as one float32 vector (prescaled inputs,
// zeros for a joined rank) with the tensors' residuals alongside, through
// the compressed ring; residuals are copied in and out under the state lock
// so a snapshot sees them before or after the step, never during (a restore
// made while the ring runs is overwritten by the step's residuals).
Status ringAllreduce(const Response& r, const std::vector<const TensorEntry*>& entries,
                     Compressor& compressor, CompressorSet& compressors, Backend& backend, int size,
                     CompressionScratch* scratch) {
  const size_t n = r.names.size();
  const size_t total =
      static_cast<size_t>(std::accumulate(r.sizes.begin(), r.sizes.end(), int64_t{0}));
  // A lone float32 tensor is read and written in place of the staging
  // copies (input and output may be one buffer: the ring reads `own` only
  // before it writes `out`); saves two passes over the tensor.
  const bool lone = n == 1 && entries[0] != nullptr && r.dtype == DataType::kFloat32;
  const bool direct_in = lone && r.prescale == 1.0;
  if (lone) TUTTI_CHECK_EQ(static_cast<int64_t>(total), entries[0]->input.numElements());
  scratch->residual.resize(total);
  if (!direct_in) scratch->own.resize(total);
  if (!lone) scratch->dense.resize(total);
  float* const own = direct_in ? nullptr : scratch->own.data();
  float* const out = lone ? static_cast<float*>(entries[0]->output.data) : scratch->dense.data();
  size_t offset = 0;
  for (size_t i = 0; i < n && !direct_in; ++i) {
    const size_t count = static_cast<size_t>(r.sizes[i]);
    if (entries[i] == nullptr) {
      std::fill_n(own + offset, count, 0.0f);
    } else {
      TUTTI_CHECK_EQ(static_cast<int64_t>(count), entries[i]->input.numElements());
      toFloat32(entries[i]->input.data, count, r.dtype, own + offset);
      scaleInPlace(own + offset, count, DataType::kFloat32, r.prescale);
    }
    offset += count;
  }
  auto moveResiduals = [&](bool in) {
    std::unique_lock<std::mutex> state = compressors.lockState();
    size_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t count = static_cast<size_t>(r.sizes[i]);
      std::vector<float>* kept =
          compressor.residualFor(tensorKey(r.process_set, r.names[i]), count);
      TUTTI_CHECK(kept != nullptr);
      float* fused = scratch->residual.data() + at;
      if (in) {
        std::copy_n(kept->data(), count, fused);
      } else {
        std::copy_n(fused, count, kept->data());
      }
      at += count;
    }
  };
  moveResiduals(true);
  std::vector<size_t> tensor_sizes(r.sizes.begin(), r.sizes.end());
  const float* const input = direct_in ? static_cast<const float*>(entries[0]->input.data) : own;
  TUTTI_RETURN_IF_ERROR(quantisedRingAllreduce(backend, compressor, tensor_sizes, input,
                                               scratch->residual.data(), out, &scratch->ring));
  moveResiduals(false);
  const double post = outputScale(r, size);
  if (lone) {
    scaleInPlace(out, total, DataType::kFloat32, post);
    return Status::ok();
  }
  offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t count = static_cast<size_t>(r.sizes[i]);
    if (entries[i] != nullptr) {
      fromFloat32(scratch->dense.data() + offset, count, r.dtype, entries[i]->output.data);
      scaleInPlace(entries[i]->output.data, count, r.dtype, post);
    }
    offset += count;
  }
  return Status::ok();
}

}  // namespace

Status compressedAllreduce(const Response& r, const std::vector<const TensorEntry*>& entries,
                           Compressor& compressor, CompressorSet& compressors, Backend& backend,
                           int size, CompressionScratch* scratch) {
  TUTTI_CHECK_EQ(r.sizes.size(), r.names.size());
  TUTTI_CHECK_EQ(entries.size(), r.names.size());
  if (compressor.exchangeKind() == ExchangeKind::kAllreduce) {
    return castAllreduce(r, entries, compressor, backend, size, scratch);
  }
  if (compressor.exchangeKind() == ExchangeKind::kQuantisedRing) {
    return ringAllreduce(r, entries, compressor, compressors, backend, size, scratch);
  }
  return gatherAllreduce(r, entries, compressor, compressors, backend, size, scratch);
}

}  // namespace tutti

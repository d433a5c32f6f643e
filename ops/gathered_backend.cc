#include "ops/gathered_backend.h"

#include <cstring>
#include <numeric>
#include <string>

#include "ops/reduce.h"

namespace tutti {

Status GatheredBackend::checkBlock(int r, size_t bytes, const char* what) const {
  const size_t held = blocks_[static_cast<size_t>(r)].size();
  if (held == bytes) return Status::ok();
  return Status::internal(std::string("gathered ") + what + ": rank " + std::to_string(r) +
                          "'s payload has " + std::to_string(held) + " bytes; expected " +
                          std::to_string(bytes));
}

Status GatheredBackend::fold(size_t offset, size_t count, DataType dtype, ReduceOp op,
                             size_t block_bytes, void* out) const {
  const size_t elem = dataTypeSize(dtype);
  for (int r = 0; r < size(); ++r) TUTTI_RETURN_IF_ERROR(checkBlock(r, block_bytes, "reduction"));
  if (count == 0) return Status::ok();
  const uint8_t* first = blocks_[0].data() + offset * elem;
  std::memcpy(out, first, count * elem);
  for (size_t r = 1; r < blocks_.size(); ++r) {
    reduceInto(out, blocks_[r].data() + offset * elem, count, dtype, op);
  }
  return Status::ok();
}

Status GatheredBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  return fold(0, count, dtype, op, count * dataTypeSize(dtype), buf);
}

Status GatheredBackend::allreduceOutOfPlace(const void* /*in*/, void* out, size_t count,
                                            DataType dtype, ReduceOp op) {
  return fold(0, count, dtype, op, count * dataTypeSize(dtype), out);
}

Status GatheredBackend::allgatherv(const void* /*input*/, void* output,
                                   const std::vector<size_t>& bytes_per_rank) {
  auto* out = static_cast<uint8_t*>(output);
  for (int r = 0; r < size(); ++r) {
    const size_t bytes = bytes_per_rank[static_cast<size_t>(r)];
    TUTTI_RETURN_IF_ERROR(checkBlock(r, bytes, "allgather"));
    if (bytes > 0) std::memcpy(out, blocks_[static_cast<size_t>(r)].data(), bytes);
    out += bytes;
  }
  return Status::ok();
}

Status GatheredBackend::broadcast(void* buf, size_t bytes, int root) {
  TUTTI_RETURN_IF_ERROR(checkBlock(root, bytes, "broadcast"));
  if (root != rank_ && bytes > 0)
    std::memcpy(buf, blocks_[static_cast<size_t>(root)].data(), bytes);
  return Status::ok();
}

Status GatheredBackend::alltoallv(const void* /*input*/, const std::vector<size_t>& /*send*/,
                                  void* /*output*/, const std::vector<size_t>& /*recv*/) {
  return Status::internal(
      "gathered alltoall: not offered (a payload does not say where its rows go)");
}

Status GatheredBackend::reducescatter(const void* /*input*/, void* output,
                                      const std::vector<size_t>& counts, DataType dtype,
                                      ReduceOp op) {
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, size_t{0});
  return fold(offset, counts[static_cast<size_t>(rank_)], dtype, op, total * dataTypeSize(dtype),
              output);
}

}  // namespace tutti

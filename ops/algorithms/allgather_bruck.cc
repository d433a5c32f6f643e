#include "ops/algorithms/allgather_bruck.h"

#include <algorithm>
#include <string>

#include "core/wire.h"
#include "ops/algorithms/ring.h"

namespace tutti {

namespace {

// A round's message: total length of what follows, then (length, bytes) per block.
std::vector<uint8_t> packBlocks(const std::vector<std::vector<uint8_t>>& held, size_t count) {
  uint64_t body = 0;
  for (size_t i = 0; i < count; ++i) body += 8 + held[i].size();
  BufferWriter w;
  w.putU64(body);
  for (size_t i = 0; i < count; ++i) {
    w.putU64(held[i].size());
    w.putRaw(held[i].data(), held[i].size());
  }
  return w.bytes();
}

Status unpackBlocks(const std::vector<uint8_t>& body, size_t count, int from,
                    std::vector<std::vector<uint8_t>>* held) {
  BufferReader r(body);
  for (size_t i = 0; i < count; ++i) {
    uint64_t len = 0;
    if (!r.getU64(&len) || len > body.size()) break;
    std::vector<uint8_t> block(static_cast<size_t>(len));
    if (len > 0 && !r.getRaw(block.data(), block.size())) break;
    held->push_back(std::move(block));
    if (i + 1 == count && r.remaining() == 0) return Status::ok();
  }
  return Status::internal("allgather of blocks: the message from rank " + std::to_string(from) +
                          " does not hold the " + std::to_string(count) +
                          " framed blocks expected (the ranks are out of step)");
}

}  // namespace

Status allgatherBlocksBruck(Transport& transport, std::vector<uint8_t> mine,
                            std::vector<std::vector<uint8_t>>* all) {
  const int n = transport.size();
  const int rank = transport.rank();
  // held[i] is the block of rank (rank + i) mod n.
  std::vector<std::vector<uint8_t>> held;
  held.reserve(static_cast<size_t>(n));
  held.push_back(std::move(mine));
  // A message is at most the whole job's blocks; more is a corrupt length.
  constexpr uint64_t kMaxMessage = uint64_t{1} << 40;
  for (int d = 1; d < n; d <<= 1) {
    const size_t count = static_cast<size_t>(std::min(d, n - d));
    const int to = ring::mod(rank - d, n);
    const int from = ring::mod(rank + d, n);
    const std::vector<uint8_t> out = packBlocks(held, count);
    const Transport::OpId sent = transport.postSend(to, out.data(), out.size());
    uint64_t body_bytes = 0;
    TUTTI_RETURN_IF_ERROR(transport.wait(transport.postRecv(from, &body_bytes, 8)));
    if (body_bytes < 8 * count || body_bytes > kMaxMessage) {
      return Status::internal("allgather of blocks: rank " + std::to_string(from) +
                              " announced a message of " + std::to_string(body_bytes) +
                              " bytes for " + std::to_string(count) + " blocks");
    }
    std::vector<uint8_t> body(static_cast<size_t>(body_bytes));
    TUTTI_RETURN_IF_ERROR(transport.wait(transport.postRecv(from, body.data(), body.size())));
    TUTTI_RETURN_IF_ERROR(transport.wait(sent));
    TUTTI_RETURN_IF_ERROR(unpackBlocks(body, count, from, &held));
  }
  all->assign(static_cast<size_t>(n), {});
  for (int i = 0; i < n; ++i)
    (*all)[static_cast<size_t>(ring::mod(rank + i, n))] = std::move(held[static_cast<size_t>(i)]);
  return Status::ok();
}

}  // namespace tutti

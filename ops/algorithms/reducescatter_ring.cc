#include "ops/algorithms/reducescatter_ring.h"

#include <cstring>

#include "core/check.h"
#include "ops/reduce.h"

namespace tutti {
namespace {

// Waits for every id in `ids` (all of them, even after an error, is not
// needed: after an error the transport is broken and the caller gives up).
Status waitAllOf(Transport& transport, const std::vector<Transport::OpId>& ids) {
  for (Transport::OpId id : ids) TUTTI_RETURN_IF_ERROR(transport.wait(id));
  return Status::ok();
}

// One hop's block: `count` elements arrive from the left neighbour in
// segments of `seg`, are reduced into `dst` and, when `forward`, are sent on
// to the right (their ids appended to `sends`).
struct Hop {
  Transport& transport;
  int left, right;
  size_t seg, esize;
  DataType dtype;
  ReduceOp op;
  std::vector<Transport::OpId>* sends;
  size_t count = 0;
  bool forward = false;
  size_t segmentBytes(size_t j) const { return ring::segmentSize(count, seg, j) * esize; }
};

// In place (dst holds this rank's contribution): each segment is received
// into one of two scratch slots, so that segment j+1 arrives while segment j
// is reduced.
Status reduceThroughSlots(const Hop& h, uint8_t* dst, uint8_t* scratch) {
  const size_t nseg = ring::numSegments(h.count, h.seg);
  const size_t seg_bytes = h.seg * h.esize;
  uint8_t* slots[2] = {scratch, scratch + seg_bytes};
  Transport::OpId pending[2] = {0, 0};
  if (nseg > 0) pending[0] = h.transport.postRecv(h.left, slots[0], h.segmentBytes(0));
  for (size_t j = 0; j < nseg; ++j) {
    if (j + 1 < nseg) {
      pending[(j + 1) % 2] =
          h.transport.postRecv(h.left, slots[(j + 1) % 2], h.segmentBytes(j + 1));
    }
    TUTTI_RETURN_IF_ERROR(h.transport.wait(pending[j % 2]));
    const size_t len = ring::segmentSize(h.count, h.seg, j);
    reduceInto(dst + j * seg_bytes, slots[j % 2], len, h.dtype, h.op);
    if (h.forward)
      h.sends->push_back(h.transport.postSend(h.right, dst + j * seg_bytes, len * h.esize));
  }
  return Status::ok();
}

// Out of place: receive straight into the destination, then fold this
// rank's contribution (`mine`) in; every segment can be posted up front.
Status reduceIntoDestination(const Hop& h, uint8_t* dst, const uint8_t* mine,
                             std::vector<Transport::OpId>* recvs) {
  const size_t nseg = ring::numSegments(h.count, h.seg);
  const size_t seg_bytes = h.seg * h.esize;
  recvs->clear();
  for (size_t j = 0; j < nseg; ++j) {
    recvs->push_back(h.transport.postRecv(h.left, dst + j * seg_bytes, h.segmentBytes(j)));
  }
  for (size_t j = 0; j < nseg; ++j) {
    TUTTI_RETURN_IF_ERROR(h.transport.wait((*recvs)[j]));
    const size_t len = ring::segmentSize(h.count, h.seg, j);
    reduceInto(dst + j * seg_bytes, mine + j * seg_bytes, len, h.dtype, h.op);
    if (h.forward)
      h.sends->push_back(h.transport.postSend(h.right, dst + j * seg_bytes, len * h.esize));
  }
  return Status::ok();
}

}  // namespace

Status ringReduceScatterBlocks(Transport& transport, const void* in, void* acc, void* own_out,
                               const ring::Blocks& blocks, DataType dtype, ReduceOp op,
                               size_t segment_bytes, std::vector<uint8_t>* scratch) {
  const int n = transport.size();
  const int rank = transport.rank();
  TUTTI_CHECK_EQ(blocks.size.size(), static_cast<size_t>(n));
  const size_t esize = dataTypeSize(dtype);
  const auto* in_bytes = static_cast<const uint8_t*>(in);
  auto* acc_bytes = static_cast<uint8_t*>(acc);
  auto* own_bytes = static_cast<uint8_t*>(own_out);
  const bool in_place = in == acc;
  const size_t own_off = blocks.offset[rank] * esize;
  const size_t own_len = blocks.size[rank] * esize;
  if (in_place) TUTTI_CHECK(own_bytes == acc_bytes + own_off);

  if (n == 1) {
    if (own_len > 0 && own_bytes != in_bytes + own_off) {
      std::memmove(own_bytes, in_bytes + own_off, own_len);
    }
    return Status::ok();
  }

  const size_t seg = ring::segmentElements(segment_bytes, esize);
  const size_t seg_bytes = seg * esize;
  if (in_place && scratch->size() < 2 * seg_bytes) scratch->resize(2 * seg_bytes);
  const int right = ring::rightOf(rank, n);
  const int left = ring::leftOf(rank, n);
  auto blockPtr = [&](int c) {
    return c == rank ? own_bytes : acc_bytes + blocks.offset[c] * esize;
  };

  std::vector<Transport::OpId> sends;
  // Step 0 sends this rank's own contribution to block r-1, straight from `in`.
  {
    const int c = ring::mod(rank - 1, n);
    const size_t count = blocks.size[c];
    for (size_t j = 0; j < ring::numSegments(count, seg); ++j) {
      const size_t len = ring::segmentSize(count, seg, j) * esize;
      sends.push_back(
          transport.postSend(right, in_bytes + blocks.offset[c] * esize + j * seg_bytes, len));
    }
  }

  std::vector<Transport::OpId> recvs;
  Hop hop{transport, left, right, seg, esize, dtype, op, &sends, 0, false};
  for (int step = 0; step <= n - 2; ++step) {
    const int c = ring::mod(rank - step - 2, n);
    hop.count = blocks.size[c];
    hop.forward = step + 1 <= n - 2;  // the reduced block goes on next step
    if (in_place) {
      TUTTI_RETURN_IF_ERROR(reduceThroughSlots(hop, blockPtr(c), scratch->data()));
    } else {
      TUTTI_RETURN_IF_ERROR(
          reduceIntoDestination(hop, blockPtr(c), in_bytes + blocks.offset[c] * esize, &recvs));
    }
  }
  // The sent regions may be overwritten by whatever runs next (the allgather
  // half of allreduce): they must have left first.
  return waitAllOf(transport, sends);
}

Status reducescatterRing(Transport& transport, const void* input, void* output,
                         const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                         size_t segment_bytes, std::vector<uint8_t>* work,
                         const std::vector<int>& ring_order) {
  TUTTI_CHECK_EQ(counts.size(), static_cast<size_t>(transport.size()));
  const ring::Blocks in_rank_order = ring::blocksFromSizes(counts);
  const size_t total_bytes = in_rank_order.total() * dataTypeSize(dtype);
  if (total_bytes == 0) return Status::ok();
  if (work->size() < total_bytes) work->resize(total_bytes);
  std::vector<uint8_t> unused_scratch;
  return ringReduceScatterBlocks(transport, input, work->data(), output,
                                 ring::reordered(in_rank_order, ring_order), dtype, op,
                                 segment_bytes, &unused_scratch);
}

}  // namespace tutti

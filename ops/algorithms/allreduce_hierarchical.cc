#include "ops/algorithms/allreduce_hierarchical.h"

#include "core/check.h"
#include "core/half.h"
#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/reducescatter_ring.h"
#include "ops/algorithms/ring.h"
#include "ops/reduce.h"

namespace tutti {
namespace {

constexpr size_t kDefaultChunkBytes = 4u << 20;

Status waitAll(Transport& t, std::vector<Transport::OpId>* ids) {
  for (Transport::OpId id : *ids) TUTTI_RETURN_IF_ERROR(t.wait(id));
  ids->clear();
  return Status::ok();
}

// The exchange across hosts in `wire` (float16/bfloat16) for a float32
// block: cast down into `to` before it, back up into the block after.
void castToWire(const uint8_t* block, size_t count, DataType wire, uint8_t* to) {
  const auto* in = reinterpret_cast<const float*>(block);
  auto* out = reinterpret_cast<uint16_t*>(to);
  if (wire == DataType::kFloat16) return floatToHalfBuffer(in, out, count);
  floatToBfloat16Buffer(in, out, count);
}

void castFromWire(const uint8_t* from, size_t count, DataType wire, uint8_t* block) {
  const auto* in = reinterpret_cast<const uint16_t*>(from);
  auto* out = reinterpret_cast<float*>(block);
  if (wire == DataType::kFloat16) return halfToFloatBuffer(in, out, count);
  bfloat16ToFloatBuffer(in, out, count);
}

// One chunk's exchange across hosts: this rank's block of the chunk (`shard`,
// `count` elements) is cut into one sub-block per cross rank; cross rank j
// reduces sub-block j (reduce-scatter), then every rank sends its reduced
// sub-block to all others (allgather). Every message is posted at once, so
// the exchange moves while this rank works on the next chunk within its host.
struct CrossChunk {
  uint8_t* shard = nullptr;  // what crosses hosts: the block itself, or its wire cast
  uint8_t* block = nullptr;  // this rank's block of the chunk in the output
  size_t count = 0;          // its elements
  ring::Blocks sub;
  std::vector<Transport::OpId> ops;
  uint8_t* staging = nullptr;  // the others' contributions to this rank's sub-block
};

struct Cross {
  Transport& t;
  size_t esize;
  DataType dtype;
  ReduceOp op;

  uint8_t* at(const CrossChunk& c, int j) const { return c.shard + c.sub.offset[j] * esize; }

  void postReduceScatter(CrossChunk& c, uint8_t* shard, size_t count) const {
    const int n = t.size(), me = t.rank();
    c.shard = shard;
    c.sub = ring::evenBlocks(count, n);
    const size_t mine = c.sub.size[me] * esize;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      if (c.sub.size[p] > 0) c.ops.push_back(t.postSend(p, at(c, p), c.sub.size[p] * esize));
      if (mine > 0) c.ops.push_back(t.postRecv(p, c.staging + p * mine, mine));
    }
  }

  // Reduces the arrived contributions in cross-rank order, then posts the allgather.
  Status reduceAndPostAllgather(CrossChunk& c) const {
    TUTTI_RETURN_IF_ERROR(waitAll(t, &c.ops));
    const int n = t.size(), me = t.rank();
    const size_t mine = c.sub.size[me];
    for (int p = 0; p < n; ++p) {
      if (p != me && mine > 0) {
        reduceInto(at(c, me), c.staging + p * mine * esize, mine, dtype, op);
      }
    }
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      if (mine > 0) c.ops.push_back(t.postSend(p, at(c, me), mine * esize));
      if (c.sub.size[p] > 0) c.ops.push_back(t.postRecv(p, at(c, p), c.sub.size[p] * esize));
    }
    return Status::ok();
  }
};

}  // namespace

Status allreduceHierarchical(Transport& local, Transport& cross, const void* in, void* out,
                             size_t count, DataType dtype, ReduceOp op, size_t segment_bytes,
                             std::vector<uint8_t>* scratch, std::vector<uint8_t>* staging,
                             size_t chunk_bytes) {
  return allreduceHierarchicalCast(local, cross, in, out, count, dtype, op, dtype, segment_bytes,
                                   scratch, staging, chunk_bytes);
}

Status allreduceHierarchicalCast(Transport& local, Transport& cross, const void* in, void* out,
                                 size_t count, DataType dtype, ReduceOp op, DataType across,
                                 size_t segment_bytes, std::vector<uint8_t>* scratch,
                                 std::vector<uint8_t>* staging, size_t chunk_bytes) {
  if (count == 0) return Status::ok();
  const bool cast = across != dtype;
  if (cast) {
    TUTTI_CHECK(dtype == DataType::kFloat32);
    TUTTI_CHECK(across == DataType::kFloat16 || across == DataType::kBFloat16);
  }
  const size_t esize = dataTypeSize(dtype);
  const size_t wsize = dataTypeSize(across);
  if (chunk_bytes == 0) chunk_bytes = kDefaultChunkBytes;
  const size_t per_chunk = chunk_bytes / esize > 0 ? chunk_bytes / esize : 1;
  const int num_chunks = static_cast<int>((count + per_chunk - 1) / per_chunk);
  const ring::Blocks chunks = ring::evenBlocks(count, num_chunks);
  const auto* in_bytes = static_cast<const uint8_t*>(in);
  auto* out_bytes = static_cast<uint8_t*>(out);
  const size_t seg_bytes = ring::segmentElements(segment_bytes, esize) * esize;
  const Cross x{cross, wsize, across, op};
  // A chunk's block within the host, and its sub-block across hosts, are
  // at most these many elements (ring::evenBlocks puts the larger first).
  const size_t block = (chunks.size[0] + local.size() - 1) / local.size();
  const size_t slot =
      static_cast<size_t>(cross.size()) * ((block + cross.size() - 1) / cross.size()) * wsize;
  const size_t wire_slot = cast ? block * wsize : 0;
  // Three chunks are in flight at once (steps 1, 2 and 3 of the steps
  // below), each with its own messages, staging and wire cast.
  constexpr int kSlots = 3;
  if (staging->size() < kSlots * (slot + wire_slot)) staging->resize(kSlots * (slot + wire_slot));
  CrossChunk inflight[kSlots];
  for (int k = 0; k < kSlots; ++k) inflight[k].staging = staging->data() + k * slot;
  uint8_t* wire = staging->data() + kSlots * slot;
  // Step t: chunk t within the host, then across hosts (posted); chunk t-1's
  // reduction across hosts; chunk t-2 back within the host. Every rank runs
  // the same steps, so every pair of ranks posts its messages in one order.
  for (int step = 0; step < num_chunks + 2; ++step) {
    if (step < num_chunks) {
      const size_t off = chunks.offset[step] * esize;
      const ring::Blocks blocks = ring::evenBlocks(chunks.size[step], local.size());
      CrossChunk& c = inflight[step % kSlots];
      c.block = out_bytes + off + blocks.offset[local.rank()] * esize;
      c.count = blocks.size[local.rank()];
      TUTTI_RETURN_IF_ERROR(ringReduceScatterBlocks(local, in_bytes + off, out_bytes + off, c.block,
                                                    blocks, dtype, op, segment_bytes, scratch));
      uint8_t* shard = c.block;
      if (cast) {
        shard = wire + (step % kSlots) * wire_slot;
        castToWire(c.block, c.count, across, shard);
      }
      x.postReduceScatter(c, shard, c.count);
    }
    if (step >= 1 && step <= num_chunks) {
      TUTTI_RETURN_IF_ERROR(x.reduceAndPostAllgather(inflight[(step - 1) % kSlots]));
    }
    if (step >= 2) {
      const int k = step - 2;
      CrossChunk& c = inflight[k % kSlots];
      TUTTI_RETURN_IF_ERROR(waitAll(cross, &c.ops));
      if (cast) castFromWire(c.shard, c.count, across, c.block);
      const ring::Blocks blocks = ring::evenBlocks(chunks.size[k], local.size());
      TUTTI_RETURN_IF_ERROR(ringAllgatherInPlace(local, out_bytes + chunks.offset[k] * esize,
                                                 blocks.scaled(esize), seg_bytes));
    }
  }
  return Status::ok();
}

}  // namespace tutti

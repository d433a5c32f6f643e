#include "coordinator/compressed_ring_allreduce.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "ops/algorithms/ring.h"

namespace tutti {

namespace {

// A chunk is reduced and sent in segments of at most this many elements
// (512 KiB of float32, 128 KiB of int8 on the wire), so that quantising and
// reducing one segment overlaps the transfer of the next, as the plain ring's
// segments do (ops/algorithms/allreduce_ring.h).
constexpr size_t kSegmentElements = 128 * 1024;

// Segment of a chunk: elements [lo, hi) of the fused vector, as pieces that
// each lie in one tensor, so that no quantisation block mixes two tensors'
// scales; packed at `offset` of the chunk's packed bytes. Every rank derives
// the same layout from the same sizes.
struct Segment {
  size_t lo = 0, hi = 0;
  std::vector<size_t> pieces;  // elements of each piece, in order
  size_t offset = 0;           // in the chunk's packed bytes
  size_t bytes = 0;            // sum of packedBytes(piece)
};
struct ChunkLayout {
  std::vector<Segment> segments;
  size_t bytes = 0;
};

ChunkLayout layoutOf(const Compressor& compressor, const std::vector<size_t>& tensor_sizes,
                     size_t lo, size_t hi) {
  ChunkLayout out;
  for (size_t s = lo; s < hi || (s == lo && lo == hi); s += kSegmentElements) {
    Segment seg;
    seg.lo = s;
    seg.hi = std::min(hi, s + kSegmentElements);
    seg.offset = out.bytes;
    size_t begin = 0;
    for (size_t count : tensor_sizes) {
      const size_t end = begin + count;
      const size_t from = std::max(begin, seg.lo);
      const size_t to = std::min(end, seg.hi);
      if (from < to) {
        seg.pieces.push_back(to - from);
        seg.bytes += compressor.packedBytes(to - from);
      }
      begin = end;
    }
    out.bytes += seg.bytes;
    out.segments.push_back(std::move(seg));
    if (lo == hi) break;
  }
  return out;
}

// Quantises (quantise) or decodes into (accumulate) the `values` of one
// segment, piece by piece, through its packed bytes at `packed`.
Status quantiseSegment(const Compressor& compressor, const Segment& seg, float* values,
                       uint8_t* packed) {
  for (size_t piece : seg.pieces) {
    TUTTI_RETURN_IF_ERROR(compressor.quantise(values, piece, packed));
    values += piece;
    packed += compressor.packedBytes(piece);
  }
  return Status::ok();
}

Status accumulateSegment(const Compressor& compressor, const Segment& seg, const uint8_t* packed,
                         float* values) {
  for (size_t piece : seg.pieces) {
    const size_t bytes = compressor.packedBytes(piece);
    TUTTI_RETURN_IF_ERROR(compressor.accumulate(packed, bytes, values, piece));
    values += piece;
    packed += bytes;
  }
  return Status::ok();
}

Status waitAll(Transport& t, std::vector<Transport::OpId>* ids) {
  Status first;
  for (auto id : *ids) {
    Status st = t.wait(id);
    if (first.isOk()) first = st;
  }
  ids->clear();
  return first;
}

}  // namespace

Status quantisedRingAllreduce(Backend& backend, const Compressor& compressor,
                              const std::vector<size_t>& tensor_sizes, const float* own,
                              float* residual, float* out, QuantisedRingScratch* scratch) {
  TUTTI_CHECK(compressor.exchangeKind() == ExchangeKind::kQuantisedRing);
  const int n = backend.size();
  const int rank = backend.rank();
  const size_t total = std::accumulate(tensor_sizes.begin(), tensor_sizes.end(), size_t{0});
  const ring::Blocks blocks = ring::evenBlocks(total, n);
  std::vector<ChunkLayout> layouts;
  std::vector<size_t> packed;
  size_t largest_segment = 0;
  for (int c = 0; c < n; ++c) {
    layouts.push_back(
        layoutOf(compressor, tensor_sizes, blocks.offset[c], blocks.offset[c] + blocks.size[c]));
    packed.push_back(layouts.back().bytes);
    for (const Segment& seg : layouts.back().segments) {
      largest_segment = std::max(largest_segment, seg.bytes);
    }
  }
  const size_t largest = *std::max_element(packed.begin(), packed.end());
  // Without point-to-point access a hop is one ringExchange of whole chunks.
  Transport* const t = n > 1 ? backend.ringTransport() : nullptr;
  for (auto& b : scratch->send) b.resize(largest);
  for (auto& b : scratch->recv) b.resize(t != nullptr ? largest_segment : largest);
  const int right = ring::rightOf(rank, n);
  const int left = ring::leftOf(rank, n);
  std::vector<Transport::OpId> sends[2];

  // acc (kept in residual) += own; quantise into `to`; residual = what was not sent.
  auto addOwnAndQuantise = [&](const Segment& seg, uint8_t* to) {
    float* acc = residual + seg.lo;
    const float* mine = own + seg.lo;
    for (size_t i = 0, e = seg.hi - seg.lo; i < e; ++i) acc[i] += mine[i];
    return quantiseSegment(compressor, seg, acc, to + seg.offset);
  };
  auto postSend = [&](int parity, const uint8_t* chunk, const Segment& seg) {
    if (t == nullptr || seg.bytes == 0) return;
    sends[parity].push_back(t->postSend(right, chunk + seg.offset, seg.bytes));
    backend.countRingBytes(seg.bytes);
  };

  // The receives of all hops, as one stream of segments (hop s brings chunk
  // r-s-2); at most two are posted, into the two segment buffers.
  std::vector<const Segment*> incoming;
  for (int step = 0; step <= n - 2; ++step) {
    for (const Segment& seg : layouts[ring::mod(rank - step - 2, n)].segments) {
      incoming.push_back(&seg);
    }
  }
  // Empty segments (a chunk of no elements: total < n) are neither sent nor
  // received, on both sides alike.
  std::vector<Transport::OpId> recv_ids(incoming.size());
  auto postRecv = [&](size_t i) {
    if (t != nullptr && i < incoming.size() && incoming[i]->bytes > 0) {
      recv_ids[i] = t->postRecv(left, scratch->recv[i % 2].data(), incoming[i]->bytes);
    }
  };

  int sent = ring::mod(rank - 1, n);  // the chunk in scratch->send[0]
  for (const Segment& seg : layouts[sent].segments) {
    TUTTI_RETURN_IF_ERROR(addOwnAndQuantise(seg, scratch->send[0].data()));
    if (n > 1) postSend(0, scratch->send[0].data(), seg);
  }
  postRecv(0);
  postRecv(1);
  size_t next = 0;  // index into `incoming`
  for (int step = 0; step <= n - 2; ++step) {
    const int c = ring::mod(rank - step - 2, n);
    const int parity = (step + 1) % 2;
    uint8_t* const chunk = scratch->send[parity].data();
    if (t != nullptr) {
      // This buffer carried the hop before the last one: those sends are done.
      TUTTI_RETURN_IF_ERROR(waitAll(*t, &sends[parity]));
    } else {
      TUTTI_RETURN_IF_ERROR(backend.ringExchange(scratch->send[step % 2].data(), packed[sent],
                                                 scratch->recv[0].data(), packed[c]));
    }
    for (const Segment& seg : layouts[c].segments) {
      const uint8_t* got = scratch->recv[0].data() + seg.offset;
      if (t != nullptr) {
        if (seg.bytes > 0) TUTTI_RETURN_IF_ERROR(t->wait(recv_ids[next]));
        got = scratch->recv[next % 2].data();
      }
      TUTTI_RETURN_IF_ERROR(accumulateSegment(compressor, seg, got, residual + seg.lo));
      postRecv(next + 2);  // its buffer is free again
      ++next;
      TUTTI_RETURN_IF_ERROR(addOwnAndQuantise(seg, chunk));
      if (step < n - 2) postSend(parity, chunk, seg);
    }
    sent = c;
  }
  if (t != nullptr) {
    for (auto& ids : sends) TUTTI_RETURN_IF_ERROR(waitAll(*t, &ids));
  }
  TUTTI_CHECK_EQ(sent, rank);  // the reduced chunk of this rank (n == 1: the whole tensor)

  const uint8_t* reduced = scratch->send[(n - 1) % 2].data();
  const ring::Blocks chunks = ring::blocksFromSizes(packed);
  scratch->gathered.resize(chunks.total());
  TUTTI_RETURN_IF_ERROR(backend.allgatherv(reduced, scratch->gathered.data(), packed));
  std::fill_n(out, total, 0.0f);
  for (int c = 0; c < n; ++c) {
    for (const Segment& seg : layouts[c].segments) {
      TUTTI_RETURN_IF_ERROR(accumulateSegment(
          compressor, seg, scratch->gathered.data() + chunks.offset[c] + seg.offset, out + seg.lo));
    }
  }
  return Status::ok();
}

}  // namespace tutti

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

// One run of the quantised ring allreduce: the chunks' layouts, the scratch
// buffers and the transfers in flight. reduceScatter() then allgather().
class QuantisedRing {
 public:
  QuantisedRing(Backend& backend, const Compressor& compressor,
                const std::vector<size_t>& tensor_sizes, const float* own, float* residual,
                QuantisedRingScratch* scratch)
      : backend_(backend),
        compressor_(compressor),
        own_(own),
        residual_(residual),
        scratch_(scratch),
        n_(backend.size()),
        rank_(backend.rank()),
        total_(std::accumulate(tensor_sizes.begin(), tensor_sizes.end(), size_t{0})),
        // Without point-to-point access a hop is one ringExchange of whole chunks.
        t_(n_ > 1 ? backend.ringTransport() : nullptr),
        right_(ring::rightOf(rank_, n_)),
        left_(ring::leftOf(rank_, n_)) {
    const ring::Blocks blocks = ring::evenBlocks(total_, n_);
    size_t largest_segment = 0;
    for (int c = 0; c < n_; ++c) {
      layouts_.push_back(
          layoutOf(compressor, tensor_sizes, blocks.offset[c], blocks.offset[c] + blocks.size[c]));
      packed_.push_back(layouts_.back().bytes);
      for (const Segment& seg : layouts_.back().segments) {
        largest_segment = std::max(largest_segment, seg.bytes);
      }
    }
    const size_t largest = *std::max_element(packed_.begin(), packed_.end());
    for (auto& b : scratch_->send) b.resize(largest);
    for (auto& b : scratch_->recv) b.resize(t_ != nullptr ? largest_segment : largest);
    // The receives of all hops, as one stream of segments (hop s brings chunk
    // r-s-2); at most two are posted, into the two segment buffers.
    for (int step = 0; step <= n_ - 2; ++step) {
      for (const Segment& seg : layouts_[ring::mod(rank_ - step - 2, n_)].segments) {
        incoming_.push_back(&seg);
      }
    }
    recv_ids_.resize(incoming_.size());
  }

  // Every chunk reduced around the ring: this rank's reduced chunk ends in
  // scratch->send[(n - 1) % 2], quantised; the residual keeps what was not sent.
  Status reduceScatter() {
    int sent = ring::mod(rank_ - 1, n_);  // the chunk in scratch->send[0]
    for (const Segment& seg : layouts_[sent].segments) {
      TUTTI_RETURN_IF_ERROR(addOwnAndQuantise(seg, scratch_->send[0].data()));
      if (n_ > 1) postSend(0, scratch_->send[0].data(), seg);
    }
    postRecv(0);
    postRecv(1);
    for (int step = 0; step <= n_ - 2; ++step) {
      const int c = ring::mod(rank_ - step - 2, n_);
      TUTTI_RETURN_IF_ERROR(hop(step, sent, c));
      sent = c;
    }
    if (t_ != nullptr) {
      for (auto& ids : sends_) TUTTI_RETURN_IF_ERROR(waitAll(*t_, &ids));
    }
    TUTTI_CHECK_EQ(sent, rank_);  // the reduced chunk of this rank (n == 1: the whole tensor)
    return Status::ok();
  }

  // Every rank's reduced chunk, gathered and decoded into `out` (total floats).
  Status allgather(float* out) {
    const uint8_t* reduced = scratch_->send[(n_ - 1) % 2].data();
    const ring::Blocks chunks = ring::blocksFromSizes(packed_);
    scratch_->gathered.resize(chunks.total());
    TUTTI_RETURN_IF_ERROR(backend_.allgatherv(reduced, scratch_->gathered.data(), packed_));
    std::fill_n(out, total_, 0.0f);
    for (int c = 0; c < n_; ++c) {
      for (const Segment& seg : layouts_[c].segments) {
        TUTTI_RETURN_IF_ERROR(accumulateSegment(
            compressor_, seg, scratch_->gathered.data() + chunks.offset[c] + seg.offset,
            out + seg.lo));
      }
    }
    return Status::ok();
  }

 private:
  // Hop `step`: chunk `c` comes in from the left, segment by segment; each is
  // added to this rank's own values and, but on the last hop, sent on.
  // `sent`: the chunk the previous hop sent.
  Status hop(int step, int sent, int c) {
    const int parity = (step + 1) % 2;
    uint8_t* const chunk = scratch_->send[parity].data();
    if (t_ != nullptr) {
      // This buffer carried the hop before the last one: those sends are done.
      TUTTI_RETURN_IF_ERROR(waitAll(*t_, &sends_[parity]));
    } else {
      TUTTI_RETURN_IF_ERROR(backend_.ringExchange(scratch_->send[step % 2].data(), packed_[sent],
                                                  scratch_->recv[0].data(), packed_[c]));
    }
    for (const Segment& seg : layouts_[c].segments) {
      const uint8_t* got = scratch_->recv[0].data() + seg.offset;
      if (t_ != nullptr) {
        if (seg.bytes > 0) TUTTI_RETURN_IF_ERROR(t_->wait(recv_ids_[next_]));
        got = scratch_->recv[next_ % 2].data();
      }
      TUTTI_RETURN_IF_ERROR(accumulateSegment(compressor_, seg, got, residual_ + seg.lo));
      postRecv(next_ + 2);  // its buffer is free again
      ++next_;
      TUTTI_RETURN_IF_ERROR(addOwnAndQuantise(seg, chunk));
      if (step < n_ - 2) postSend(parity, chunk, seg);
    }
    return Status::ok();
  }

  // acc (kept in residual) += own; quantise into `to`; residual = what was not sent.
  Status addOwnAndQuantise(const Segment& seg, uint8_t* to) {
    float* acc = residual_ + seg.lo;
    const float* mine = own_ + seg.lo;
    for (size_t i = 0, e = seg.hi - seg.lo; i < e; ++i) acc[i] += mine[i];
    return quantiseSegment(compressor_, seg, acc, to + seg.offset);
  }
  void postSend(int parity, const uint8_t* chunk, const Segment& seg) {
    if (t_ == nullptr || seg.bytes == 0) return;
    sends_[parity].push_back(t_->postSend(right_, chunk + seg.offset, seg.bytes));
    backend_.countRingBytes(seg.bytes);
  }
  // Empty segments (a chunk of no elements: total < n) are neither sent nor
  // received, on both sides alike.
  void postRecv(size_t i) {
    if (t_ != nullptr && i < incoming_.size() && incoming_[i]->bytes > 0) {
      recv_ids_[i] = t_->postRecv(left_, scratch_->recv[i % 2].data(), incoming_[i]->bytes);
    }
  }

  Backend& backend_;
  const Compressor& compressor_;
  const float* const own_;
  float* const residual_;
  QuantisedRingScratch* const scratch_;
  const int n_;
  const int rank_;
  const size_t total_;
  Transport* const t_;
  const int right_;
  const int left_;
  std::vector<ChunkLayout> layouts_;
  std::vector<size_t> packed_;  // packed bytes of each chunk
  std::vector<Transport::OpId> sends_[2];
  std::vector<const Segment*> incoming_;
  std::vector<Transport::OpId> recv_ids_;
  size_t next_ = 0;  // index into incoming_
};

}  // namespace

Status quantisedRingAllreduce(Backend& backend, const Compressor& compressor,
                              const std::vector<size_t>& tensor_sizes, const float* own,
                              float* residual, float* out, QuantisedRingScratch* scratch) {
  TUTTI_CHECK(compressor.exchangeKind() == ExchangeKind::kQuantisedRing);
  QuantisedRing run(backend, compressor, tensor_sizes, own, residual, scratch);
  TUTTI_RETURN_IF_ERROR(run.reduceScatter());
  return run.allgather(out);
}

}  // namespace tutti

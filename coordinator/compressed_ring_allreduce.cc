#include "coordinator/compressed_ring_allreduce.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "ops/algorithms/ring.h"

namespace tutti {

namespace {

// Chunk c of the fused vector as pieces that each lie in one tensor, so that
// no quantisation block mixes two tensors' scales. Every rank derives the
// same layout from the same sizes.
struct ChunkLayout {
  std::vector<size_t> pieces;  // elements of each piece, in order
  size_t bytes = 0;            // sum of packedBytes(piece)
};

ChunkLayout layoutOf(const Compressor& compressor, const std::vector<size_t>& tensor_sizes,
                     size_t lo, size_t hi) {
  ChunkLayout out;
  size_t begin = 0;
  for (size_t count : tensor_sizes) {
    const size_t end = begin + count;
    const size_t from = std::max(begin, lo);
    const size_t to = std::min(end, hi);
    if (from < to) {
      out.pieces.push_back(to - from);
      out.bytes += compressor.packedBytes(to - from);
    }
    begin = end;
  }
  return out;
}

// Quantises (quantise) or decodes into (accumulate) the `values` of one
// chunk, piece by piece, through its packed bytes at `packed`.
Status quantiseChunk(const Compressor& compressor, const ChunkLayout& layout, float* values,
                     uint8_t* packed) {
  for (size_t piece : layout.pieces) {
    TUTTI_RETURN_IF_ERROR(compressor.quantise(values, piece, packed));
    values += piece;
    packed += compressor.packedBytes(piece);
  }
  return Status::ok();
}

Status accumulateChunk(const Compressor& compressor, const ChunkLayout& layout,
                       const uint8_t* packed, float* values) {
  for (size_t piece : layout.pieces) {
    const size_t bytes = compressor.packedBytes(piece);
    TUTTI_RETURN_IF_ERROR(compressor.accumulate(packed, bytes, values, piece));
    values += piece;
    packed += bytes;
  }
  return Status::ok();
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
  for (int c = 0; c < n; ++c) {
    layouts.push_back(
        layoutOf(compressor, tensor_sizes, blocks.offset[c], blocks.offset[c] + blocks.size[c]));
    packed.push_back(layouts.back().bytes);
  }
  const size_t largest = *std::max_element(packed.begin(), packed.end());
  scratch->send.resize(largest);
  scratch->recv.resize(largest);

  // acc[c] (kept in residual[c]) += own[c]; quantise; residual[c] = what was not sent.
  auto addOwnAndQuantise = [&](int c) {
    float* acc = residual + blocks.offset[c];
    const float* mine = own + blocks.offset[c];
    for (size_t i = 0; i < blocks.size[c]; ++i) acc[i] += mine[i];
    return quantiseChunk(compressor, layouts[c], acc, scratch->send.data());
  };

  int sent = ring::mod(rank - 1, n);  // the chunk in scratch->send
  TUTTI_RETURN_IF_ERROR(addOwnAndQuantise(sent));
  for (int step = 0; step <= n - 2; ++step) {
    const int c = ring::mod(rank - step - 2, n);
    TUTTI_RETURN_IF_ERROR(
        backend.ringExchange(scratch->send.data(), packed[sent], scratch->recv.data(), packed[c]));
    TUTTI_RETURN_IF_ERROR(
        accumulateChunk(compressor, layouts[c], scratch->recv.data(), residual + blocks.offset[c]));
    TUTTI_RETURN_IF_ERROR(addOwnAndQuantise(c));
    sent = c;
  }
  TUTTI_CHECK_EQ(sent, rank);  // the reduced chunk of this rank (n == 1: the whole tensor)

  const ring::Blocks chunks = ring::blocksFromSizes(packed);
  scratch->gathered.resize(chunks.total());
  TUTTI_RETURN_IF_ERROR(backend.allgatherv(scratch->send.data(), scratch->gathered.data(), packed));
  std::fill_n(out, total, 0.0f);
  for (int c = 0; c < n; ++c) {
    TUTTI_RETURN_IF_ERROR(accumulateChunk(compressor, layouts[c],
                                          scratch->gathered.data() + chunks.offset[c],
                                          out + blocks.offset[c]));
  }
  return Status::ok();
}

}  // namespace tutti

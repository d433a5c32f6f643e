#pragma once

// Pure peer and chunk arithmetic for ring and pipelined algorithms. No I/O, no
// state: every function is deterministic in its arguments, so every rank
// computes the same message sizes as its peers (which is what keeps the
// streams between them matched). Unit-tested in tests/ops/ring_test.cc.
//
// Units: "elements" unless a name says bytes.

#include <cstddef>
#include <vector>

#include "core/check.h"
#include "core/settings.h"

namespace tutti::ring {

// Pipeline segment size used when the caller passes 0: TUTTI_SEGMENT_BYTES's
// default (core/settings.h).
constexpr size_t kDefaultSegmentBytes = static_cast<size_t>(tutti::kDefaultSegmentBytes);

// a mod n in [0, n), for any sign of a.
inline int mod(int a, int n) {
  TUTTI_CHECK_LT(0, n);
  const int m = a % n;
  return m < 0 ? m + n : m;
}

inline int rightOf(int rank, int size) {
  return mod(rank + 1, size);
}
inline int leftOf(int rank, int size) {
  return mod(rank - 1, size);
}

// Splitting `count` elements into `n` chunks: the first count % n chunks get
// one element more than the others.
inline size_t chunkSize(size_t count, int n, int chunk) {
  TUTTI_CHECK_LT(0, n);
  TUTTI_CHECK_LT(chunk, n);
  const size_t un = static_cast<size_t>(n);
  const size_t uc = static_cast<size_t>(chunk);
  return count / un + (uc < count % un ? 1 : 0);
}

inline size_t chunkOffset(size_t count, int n, int chunk) {
  TUTTI_CHECK_LT(0, n);
  TUTTI_CHECK_LE(chunk, n);
  const size_t un = static_cast<size_t>(n);
  const size_t uc = static_cast<size_t>(chunk);
  const size_t rem = count % un;
  return uc * (count / un) + (uc < rem ? uc : rem);
}

// Contiguous blocks of a buffer, one per rank: block r is [offset[r],
// offset[r] + size[r]). Units are whatever the caller uses (elements or bytes).
struct Blocks {
  std::vector<size_t> offset;
  std::vector<size_t> size;

  size_t total() const { return offset.empty() ? 0 : offset.back() + size.back(); }
  // The same blocks in units `factor` times smaller (elements -> bytes).
  Blocks scaled(size_t factor) const {
    Blocks out{offset, size};
    for (size_t& v : out.offset) v *= factor;
    for (size_t& v : out.size) v *= factor;
    return out;
  }
};

// `count` elements split as by chunkSize/chunkOffset.
inline Blocks evenBlocks(size_t count, int n) {
  Blocks b;
  for (int c = 0; c < n; ++c) {
    b.offset.push_back(chunkOffset(count, n, c));
    b.size.push_back(chunkSize(count, n, c));
  }
  return b;
}

// Consecutive blocks of the given sizes.
inline Blocks blocksFromSizes(const std::vector<size_t>& sizes) {
  Blocks b;
  size_t at = 0;
  for (size_t s : sizes) {
    b.offset.push_back(at);
    b.size.push_back(s);
    at += s;
  }
  return b;
}

// The blocks in the order a ring visits them: entry p of the result is block
// order[p] of `blocks` (order a permutation of 0..n-1), so that a ring whose
// position p is rank order[p] still lands every rank's block at that rank's
// offset. An empty `order` keeps the blocks as they are. total() of the result
// is not meaningful: its last block need not be the buffer's last.
inline Blocks reordered(const Blocks& blocks, const std::vector<int>& order) {
  if (order.empty()) return blocks;
  TUTTI_CHECK_EQ(order.size(), blocks.size.size());
  Blocks out;
  for (int r : order) {
    out.offset.push_back(blocks.offset[static_cast<size_t>(r)]);
    out.size.push_back(blocks.size[static_cast<size_t>(r)]);
  }
  return out;
}

// Elements per pipeline segment: segment_bytes rounded down to whole
// elements, at least one; 0 means kDefaultSegmentBytes.
inline size_t segmentElements(size_t segment_bytes, size_t element_bytes) {
  TUTTI_CHECK_LT(size_t{0}, element_bytes);
  if (segment_bytes == 0) segment_bytes = kDefaultSegmentBytes;
  const size_t n = segment_bytes / element_bytes;
  return n == 0 ? 1 : n;
}

// Number of segments of `seg` elements covering `count` elements (0 for 0).
inline size_t numSegments(size_t count, size_t seg) {
  TUTTI_CHECK_LT(size_t{0}, seg);
  return (count + seg - 1) / seg;
}

// Size of segment j of `count` elements cut into segments of `seg`.
inline size_t segmentSize(size_t count, size_t seg, size_t j) {
  const size_t begin = j * seg;
  TUTTI_CHECK_LT(begin, count);
  return count - begin < seg ? count - begin : seg;
}

}  // namespace tutti::ring

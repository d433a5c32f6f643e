#pragma once

// Host-side arithmetic of the CUDA kernels (ops/cuda/kernels.cu), in plain
// C++ so that it is unit-tested without a GPU (tests/cuda/copy_plan_test.cc).
//
// Batched copy: a batch of copies {src, dst, bytes} runs as one kernel launch.
// Each copy is cut into chunks of `chunk_bytes`; every chunk is one block's
// work ("virtual block"). Descriptors carry the prefix sum of their chunk
// counts (first_block), so a block finds its copy with a binary search over
// the descriptors (findCopy, the same function on host and device). The grid
// is capped at `max_grid` blocks; blocks then loop over virtual blocks with a
// stride of the grid size. Batches of more than `max_descriptors` copies are
// split into several launches.
//
// Elementwise kernels (scale, cast): `threads` threads per block, each
// handling `items_per_thread` elements per pass; the grid covers the count
// once, capped at `max_grid` (threads then loop grid-stride).
//
// Thread-safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/device.h"

#if defined(__CUDACC__)
#define TUTTI_HOST_DEVICE __host__ __device__
#else
#define TUTTI_HOST_DEVICE
#endif

namespace tutti {
namespace cuda {

// Layout shared by host and device code: 32 bytes, no padding.
struct CopyDescriptor {
  const void* src;
  void* dst;
  uint64_t bytes;
  uint64_t first_block;  // virtual blocks before this copy's first chunk
};
static_assert(sizeof(CopyDescriptor) == 32, "CopyDescriptor is uploaded as is");

struct CopyLaunch {
  std::vector<CopyDescriptor> descriptors;  // non-empty
  uint64_t virtual_blocks = 0;              // chunks over every descriptor
  uint32_t grid = 0;                        // blocks launched: min(virtual_blocks, max_grid)
};

constexpr size_t kDefaultChunkBytes = size_t{64} << 10;
constexpr uint32_t kDefaultMaxGrid = 65535;
constexpr size_t kDefaultMaxDescriptors = 16384;

// Plans the launches of one batch. Zero-byte copies are dropped; no launch
// when nothing is left. chunk_bytes must be a multiple of 16 (the kernel's
// widest access) and > 0; max_grid and max_descriptors > 0 (checked).
std::vector<CopyLaunch> planCopyLaunches(const std::vector<DeviceCopy>& copies,
                                         size_t chunk_bytes = kDefaultChunkBytes,
                                         uint32_t max_grid = kDefaultMaxGrid,
                                         size_t max_descriptors = kDefaultMaxDescriptors);

// Index of the descriptor whose chunks contain virtual block `block`: the
// last i with first_block <= block. Requires count > 0, first_block[0] == 0,
// first_block strictly increasing (planCopyLaunches guarantees it).
TUTTI_HOST_DEVICE inline uint32_t findCopy(const CopyDescriptor* descriptors, uint32_t count,
                                           uint64_t block) {
  uint32_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (descriptors[mid].first_block <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Widest access (16, 8, 4, 2 or 1 bytes) that divides both addresses and
// the chunk offset, so that one chunk is copied with aligned vector accesses
// (a tail of fewer bytes is copied byte by byte).
TUTTI_HOST_DEVICE inline uint32_t copyWidth(uintptr_t src, uintptr_t dst) {
  const uintptr_t both = src | dst;
  if (both % 16 == 0) return 16;
  if (both % 8 == 0) return 8;
  if (both % 4 == 0) return 4;
  if (both % 2 == 0) return 2;
  return 1;
}

// Blocks for an elementwise kernel over `count` elements (0 for count 0).
uint32_t elementwiseGrid(size_t count, uint32_t threads, uint32_t items_per_thread,
                         uint32_t max_grid = kDefaultMaxGrid);

// Whether the scale kernel changes anything: false for factor 1 with
// divisor 1, count 0 and bool (which ops/reduce.h leaves unchanged).
bool scaleIsNoop(size_t count, DataType dtype, double factor, int divisor = 1);

// Whether the cast kernel converts `from` to `to`: float32 or float64 to
// float16 or bfloat16, and back (DeviceContext::cast).
bool isCastPair(DataType from, DataType to);

}  // namespace cuda
}  // namespace tutti

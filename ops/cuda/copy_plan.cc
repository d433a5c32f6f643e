#include "ops/cuda/copy_plan.h"

#include <algorithm>

#include "core/check.h"

namespace tutti {
namespace cuda {

std::vector<CopyLaunch> planCopyLaunches(const std::vector<DeviceCopy>& copies, size_t chunk_bytes,
                                         uint32_t max_grid, size_t max_descriptors) {
  TUTTI_CHECK(chunk_bytes > 0 && chunk_bytes % 16 == 0);
  TUTTI_CHECK_GE(max_grid, 1u);
  TUTTI_CHECK_GE(max_descriptors, size_t{1});
  std::vector<CopyLaunch> launches;
  for (const DeviceCopy& c : copies) {
    if (c.bytes == 0) continue;
    if (launches.empty() || launches.back().descriptors.size() == max_descriptors) {
      launches.emplace_back();
    }
    CopyLaunch& launch = launches.back();
    const uint64_t chunks = (c.bytes + chunk_bytes - 1) / chunk_bytes;
    launch.descriptors.push_back(CopyDescriptor{c.src, c.dst, c.bytes, launch.virtual_blocks});
    launch.virtual_blocks += chunks;
  }
  for (CopyLaunch& launch : launches) {
    launch.grid = static_cast<uint32_t>(std::min<uint64_t>(launch.virtual_blocks, max_grid));
  }
  return launches;
}

uint32_t elementwiseGrid(size_t count, uint32_t threads, uint32_t items_per_thread,
                         uint32_t max_grid) {
  TUTTI_CHECK(threads > 0 && items_per_thread > 0 && max_grid > 0);
  if (count == 0) return 0;
  const uint64_t per_block = uint64_t{threads} * items_per_thread;
  const uint64_t blocks = (count + per_block - 1) / per_block;
  return static_cast<uint32_t>(std::min<uint64_t>(blocks, max_grid));
}

bool scaleIsNoop(size_t count, DataType dtype, double factor, int divisor) {
  return count == 0 || (factor == 1.0 && divisor == 1) || dtype == DataType::kBool;
}

bool isCastPair(DataType from, DataType to) {
  auto wide = [](DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64; };
  auto narrow = [](DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; };
  return (wide(from) && narrow(to)) || (narrow(from) && wide(to));
}

}  // namespace cuda
}  // namespace tutti

#include "coordinator/fusion.h"

#include <new>

#include "core/check.h"

namespace tutti {

namespace {

constexpr std::align_val_t kAlignment{64};

bool fusible(const Response& r) {
  return r.kind == Response::Kind::kOp && r.type == OpType::kAllreduce && r.names.size() == 1 &&
         r.sizes.size() == 1;
}

bool compatible(const Response& a, const Response& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.device == b.device && a.joined_ranks == b.joined_ranks &&
         a.compression == b.compression && a.process_set == b.process_set;
}

int64_t bytesOf(const Response& r) {
  int64_t n = 0;
  for (int64_t s : r.sizes) n += s;
  return n * static_cast<int64_t>(dataTypeSize(r.dtype));
}

}  // namespace

std::vector<Response> planFusion(std::vector<Response> ready, int64_t threshold_bytes) {
  if (threshold_bytes <= 0) return ready;
  std::vector<Response> out;
  std::vector<size_t> open;  // indices into `out` of fused responses that may still grow
  std::vector<int64_t> open_bytes;
  for (Response& r : ready) {
    const int64_t bytes = fusible(r) ? bytesOf(r) : threshold_bytes + 1;
    if (bytes > threshold_bytes) {
      out.push_back(std::move(r));
      continue;
    }
    bool placed = false;
    for (size_t k = 0; k < open.size() && !placed; ++k) {
      Response& group = out[open[k]];
      if (!compatible(group, r) || open_bytes[k] + bytes > threshold_bytes) continue;
      group.names.push_back(r.names[0]);
      group.sizes.push_back(r.sizes[0]);
      open_bytes[k] += bytes;
      placed = true;
    }
    if (!placed) {
      open.push_back(out.size());
      open_bytes.push_back(bytes);
      out.push_back(std::move(r));
    }
  }
  return out;
}

void FusionBuffer::AlignedDelete::operator()(uint8_t* p) const {
  ::operator delete[](p, kAlignment);
}

uint8_t* FusionBuffer::reserve(size_t bytes) {
  if (bytes > capacity_ || !data_) {
    // Grow geometrically so that a slowly growing workload reallocates rarely.
    size_t want = std::max(bytes, capacity_ + capacity_ / 2);
    if (want == 0) want = 64;
    data_.reset(static_cast<uint8_t*>(::operator new[](want, kAlignment)));
    capacity_ = want;
  }
  return data_.get();
}

}  // namespace tutti

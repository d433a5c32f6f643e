#pragma once

// The 16-byte header that starts every allgather-kind chunk (topk, int8), so a
// chunk from a rank with other settings, or a corrupt one, is an error value.
// Layout (host byte order; all ranks of a job share one architecture):
//   u8 format (kPackedTopK / kPackedInt8), u8 version (1), u16 zero,
//   u32 param (topk: k, the number of pairs; int8: block size),
//   u64 count (elements of the dense tensor).
// Internal to compression/.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tutti::compression_detail {

constexpr uint8_t kPackedTopK = 0x71;
constexpr uint8_t kPackedInt8 = 0x72;
constexpr uint8_t kPackedVersion = 1;
constexpr size_t kPackedHeaderBytes = 16;

struct PackedHeader {
  uint8_t format = 0;
  uint32_t param = 0;
  uint64_t count = 0;
};

inline void writePackedHeader(const PackedHeader& h, uint8_t* out) {
  out[0] = h.format;
  out[1] = kPackedVersion;
  out[2] = 0;
  out[3] = 0;
  std::memcpy(out + 4, &h.param, 4);
  std::memcpy(out + 8, &h.count, 8);
}

// False when fewer than kPackedHeaderBytes bytes are there or the version or
// padding is wrong; the caller checks format, param and count.
inline bool readPackedHeader(const uint8_t* in, size_t bytes, PackedHeader* h) {
  if (in == nullptr || bytes < kPackedHeaderBytes) return false;
  if (in[1] != kPackedVersion || in[2] != 0 || in[3] != 0) return false;
  h->format = in[0];
  std::memcpy(&h->param, in + 4, 4);
  std::memcpy(&h->count, in + 8, 8);
  return true;
}

}  // namespace tutti::compression_detail

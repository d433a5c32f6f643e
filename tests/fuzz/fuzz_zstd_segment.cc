// Fuzzes the zstd wire stage's decoder (ops/tcp/zstd_stage.h): a segment
// from a peer's data connection. Input: the segment. The receiver's buffer
// is the size the header announces (at most 1 MiB, as the transport's
// frames), or one byte less/more when the input's last byte says so.
// Checks: bad input is kInvalidArgument, never an over-read or over-write
// (AddressSanitizer), and a segment that decodes re-encodes to the same raw
// bytes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ops/tcp/zstd_stage.h"
#include "tests/fuzz/fuzz_check.h"

using namespace tutti;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<ZstdStage> stage = [] {
    std::unique_ptr<ZstdStage> s;
    FUZZ_CHECK(ZstdStage::create(ZstdStageOptions{}, &s).isOk());
    return s;
  }();
  size_t raw = 0;
  Status st = ZstdStage::segmentRawBytes(data, size, &raw);
  if (!st.isOk()) {
    FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
    raw = size;  // still try to decode into some buffer
  }
  if (raw > (1u << 20)) return 0;
  size_t out_bytes = raw;
  if (size > 0 && data[size - 1] == 0xfe && out_bytes > 0) --out_bytes;
  if (size > 0 && data[size - 1] == 0xff) ++out_bytes;
  // Exactly out_bytes long, so that AddressSanitizer sees any write past it.
  std::unique_ptr<uint8_t[]> out(new uint8_t[out_bytes + (out_bytes == 0)]);
  Status dst = stage->decompressSegment(data, size, out.get(), out_bytes);
  if (!dst.isOk()) {
    FUZZ_CHECK(dst.code() == StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(st.isOk() && out_bytes == raw);
  std::vector<uint8_t> again;
  FUZZ_CHECK(stage->compressSegment(out.get(), out_bytes, &again).isOk());
  std::unique_ptr<uint8_t[]> back(new uint8_t[out_bytes + 1]);
  FUZZ_CHECK(stage->decompressSegment(again.data(), again.size(), back.get(), out_bytes).isOk());
  FUZZ_CHECK(std::equal(back.get(), back.get() + out_bytes, out.get()));
  return 0;
}

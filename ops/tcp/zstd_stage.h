#pragma once

// Lossless zstd stage for wire segments (the TCP backend's pipelined ring
// segments). Lossless, so it composes with any Compressor or none.
//
// Segment format: u8 mode (0 = raw, 1 = zstd frame), u64 raw size in bytes
// (host byte order: all ranks share one architecture), then the payload:
// the raw bytes, or one zstd frame with a content size and a checksum (so a
// corrupt compressed payload is detected, not decoded to garbage).
//
// When it pays: a segment is sent compressed only when its frame is at least
// `min_saving` (5 %) smaller than the raw bytes (zstd is given exactly that
// much room and gives up otherwise). The stage keeps a running (exponentially
// weighted) ratio of compressed to raw size over the segments it tried; when
// that ratio shows compression does not pay, it sends the next `backoff`
// segments raw without trying, then probes again; the backoff doubles on each
// failed probe (up to max_backoff_segments) and resets when a probe pays.
// Segments below min_segment_bytes always go raw. Gradients in float32 rarely
// compress; zeros, sparse or integer data do.
//
// Errors: create() rejects a level outside [ZSTD_minCLevel(), ZSTD_maxCLevel()]
// with kInvalidArgument. decompressSegment() returns kInvalidArgument for a
// bad header, a raw size other than the receiver's, a payload of the wrong
// length, or any zstd error (corrupt frame, checksum mismatch); it never
// writes past out_bytes or reads past segment_bytes. compressSegment() fails
// only on a zstd internal error (kInternal).
//
// Threading: not thread-safe (it owns zstd contexts and running statistics);
// use one ZstdStage per connection or I/O thread. Decoding needs no state
// from the encoder: any stage decodes any stage's segments.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"

namespace tutti {

struct ZstdStageOptions {
  int level = 1;                  // zstd level; 1 is fast, 0 means zstd's default (3)
  double min_saving = 0.05;       // fraction of the raw size a frame must save
  size_t min_segment_bytes = 64;  // smaller segments are sent raw
  uint32_t initial_backoff_segments = 8;
  uint32_t max_backoff_segments = 1024;
};

class ZstdStage {
 public:
  static constexpr size_t kHeaderBytes = 9;
  static constexpr uint8_t kModeRaw = 0;
  static constexpr uint8_t kModeZstd = 1;

  struct Stats {
    uint64_t segments = 0;             // segments encoded
    uint64_t compressed_segments = 0;  // of which sent as zstd frames
    uint64_t skipped_segments = 0;     // of which sent raw without trying (backoff, small)
    uint64_t raw_bytes = 0;            // payload bytes given to compressSegment
    uint64_t wire_bytes = 0;           // bytes it produced, headers included
    double running_ratio = 0.0;        // compressed / raw over recent attempts (1 = no gain)
  };

  static Status create(const ZstdStageOptions& options, std::unique_ptr<ZstdStage>* out);
  ~ZstdStage();
  ZstdStage(const ZstdStage&) = delete;
  ZstdStage& operator=(const ZstdStage&) = delete;

  // Encodes `bytes` bytes at `data` into *out (resized; at most
  // maxSegmentBytes(bytes)).
  Status compressSegment(const void* data, size_t bytes, std::vector<uint8_t>* out);

  // The same segment, appended to *out, except that a raw segment is only its
  // header: *raw says so, and the caller sends the `bytes` raw bytes from
  // `data` right after it (no copy; the TCP wire path).
  Status appendSegment(const void* data, size_t bytes, std::vector<uint8_t>* out, bool* raw);

  // Decodes the segment of `segment_bytes` bytes at `segment` into `out`,
  // whose size `out_bytes` the receiver knows (the segment's raw size must
  // equal it).
  Status decompressSegment(const uint8_t* segment, size_t segment_bytes, void* out,
                           size_t out_bytes);

  // The raw size a segment's header announces (for receivers that do not
  // know it); kInvalidArgument when the header is bad.
  static Status segmentRawBytes(const uint8_t* segment, size_t segment_bytes, size_t* raw_bytes);

  // Largest encoding of `raw_bytes` bytes (raw is always possible).
  static size_t maxSegmentBytes(size_t raw_bytes) { return kHeaderBytes + raw_bytes; }

  const Stats& stats() const { return stats_; }

 private:
  struct Contexts;
  ZstdStage(const ZstdStageOptions& options, std::unique_ptr<Contexts> contexts);
  // Appends a raw segment's header at out[at], with its payload if `copy`.
  void appendRaw(const void* data, size_t bytes, size_t at, bool copy, std::vector<uint8_t>* out);
  Status encode(const void* data, size_t bytes, bool copy_raw, std::vector<uint8_t>* out,
                bool* raw);

  ZstdStageOptions options_;
  std::unique_ptr<Contexts> contexts_;
  Stats stats_;
  uint64_t attempts_ = 0;   // segments zstd was tried on
  uint32_t skip_left_ = 0;  // segments still to send raw without trying
  uint32_t backoff_;        // skip length after the next failed probe
};

}  // namespace tutti

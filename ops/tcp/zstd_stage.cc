#include "ops/tcp/zstd_stage.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace tutti {

namespace {

// Weight of the newest attempt in the running ratio.
constexpr double kRatioWeight = 0.25;

void writeHeader(uint8_t mode, uint64_t raw_bytes, uint8_t* out) {
  out[0] = mode;
  std::memcpy(out + 1, &raw_bytes, sizeof(raw_bytes));
}

}  // namespace

struct ZstdStage::Contexts {
  ZSTD_CCtx* cctx = nullptr;
  ZSTD_DCtx* dctx = nullptr;
  ~Contexts() {
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
  }
};

Status ZstdStage::create(const ZstdStageOptions& options, std::unique_ptr<ZstdStage>* out) {
  if (options.level < ZSTD_minCLevel() || options.level > ZSTD_maxCLevel()) {
    return Status::invalidArgument("zstd level " + std::to_string(options.level) +
                                   " is out of range [" + std::to_string(ZSTD_minCLevel()) + ", " +
                                   std::to_string(ZSTD_maxCLevel()) + "]");
  }
  if (!(options.min_saving >= 0.0 && options.min_saving < 1.0)) {
    return Status::invalidArgument("zstd min_saving " + std::to_string(options.min_saving) +
                                   " is out of range [0, 1)");
  }
  if (options.initial_backoff_segments < 1 ||
      options.max_backoff_segments < options.initial_backoff_segments) {
    return Status::invalidArgument("zstd backoff: need 1 <= initial (" +
                                   std::to_string(options.initial_backoff_segments) + ") <= max (" +
                                   std::to_string(options.max_backoff_segments) + ")");
  }
  auto contexts = std::make_unique<Contexts>();
  contexts->cctx = ZSTD_createCCtx();
  contexts->dctx = ZSTD_createDCtx();
  if (contexts->cctx == nullptr || contexts->dctx == nullptr) {
    return Status::internal("zstd: cannot allocate a compression context");
  }
  const size_t r1 = ZSTD_CCtx_setParameter(contexts->cctx, ZSTD_c_compressionLevel, options.level);
  const size_t r2 = ZSTD_CCtx_setParameter(contexts->cctx, ZSTD_c_checksumFlag, 1);
  const size_t r3 = ZSTD_CCtx_setParameter(contexts->cctx, ZSTD_c_contentSizeFlag, 1);
  if (ZSTD_isError(r1) || ZSTD_isError(r2) || ZSTD_isError(r3)) {
    return Status::internal("zstd: cannot set compression parameters");
  }
  out->reset(new ZstdStage(options, std::move(contexts)));
  return Status::ok();
}

ZstdStage::ZstdStage(const ZstdStageOptions& options, std::unique_ptr<Contexts> contexts)
    : options_(options),
      contexts_(std::move(contexts)),
      backoff_(options.initial_backoff_segments) {}

ZstdStage::~ZstdStage() = default;

void ZstdStage::appendRaw(const void* data, size_t bytes, size_t at, bool copy,
                          std::vector<uint8_t>* out) {
  out->resize(at + kHeaderBytes + (copy ? bytes : 0));
  writeHeader(kModeRaw, bytes, out->data() + at);
  if (copy && bytes > 0) std::memcpy(out->data() + at + kHeaderBytes, data, bytes);
  stats_.wire_bytes += kHeaderBytes + bytes;
}

Status ZstdStage::compressSegment(const void* data, size_t bytes, std::vector<uint8_t>* out) {
  out->clear();
  bool raw = false;
  return encode(data, bytes, true, out, &raw);
}

Status ZstdStage::appendSegment(const void* data, size_t bytes, std::vector<uint8_t>* out,
                                bool* raw) {
  return encode(data, bytes, false, out, raw);
}

Status ZstdStage::encode(const void* data, size_t bytes, bool copy_raw, std::vector<uint8_t>* out,
                         bool* raw) {
  const size_t at = out->size();
  *raw = true;
  ++stats_.segments;
  stats_.raw_bytes += bytes;
  if (bytes < options_.min_segment_bytes || skip_left_ > 0) {
    if (skip_left_ > 0) --skip_left_;
    ++stats_.skipped_segments;
    appendRaw(data, bytes, at, copy_raw, out);
    return Status::ok();
  }

  // Room for a frame that saves at least min_saving: zstd stops with
  // dstSize_tooSmall when the frame would not fit, which means "does not pay".
  const auto room =
      static_cast<size_t>(std::floor(static_cast<double>(bytes) * (1.0 - options_.min_saving)));
  out->resize(at + kHeaderBytes + room);
  const size_t frame =
      ZSTD_compress2(contexts_->cctx, out->data() + at + kHeaderBytes, room, data, bytes);
  bool pays = false;
  double ratio = 1.0;
  if (ZSTD_isError(frame)) {
    if (ZSTD_getErrorCode(frame) != ZSTD_error_dstSize_tooSmall) {
      out->resize(at);
      return Status::internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(frame));
    }
    // A failed frame leaves the context mid-frame: start the next one clean.
    ZSTD_CCtx_reset(contexts_->cctx, ZSTD_reset_session_only);
  } else {
    ratio = static_cast<double>(frame) / static_cast<double>(bytes);
    pays = frame < bytes &&
           static_cast<double>(bytes - frame) >= options_.min_saving * static_cast<double>(bytes);
  }
  stats_.running_ratio =
      ++attempts_ == 1 ? ratio : (1.0 - kRatioWeight) * stats_.running_ratio + kRatioWeight * ratio;

  if (pays) {
    backoff_ = options_.initial_backoff_segments;
    ++stats_.compressed_segments;
    out->resize(at + kHeaderBytes + frame);
    writeHeader(kModeZstd, bytes, out->data() + at);
    stats_.wire_bytes += kHeaderBytes + frame;
    *raw = false;
    return Status::ok();
  }
  if (stats_.running_ratio > 1.0 - options_.min_saving) {
    skip_left_ = backoff_;
    backoff_ = std::min(backoff_ * 2, options_.max_backoff_segments);
  }
  appendRaw(data, bytes, at, copy_raw, out);
  return Status::ok();
}

Status ZstdStage::segmentRawBytes(const uint8_t* segment, size_t segment_bytes, size_t* raw_bytes) {
  if (segment == nullptr || segment_bytes < kHeaderBytes) {
    return Status::invalidArgument("zstd stage: segment of " + std::to_string(segment_bytes) +
                                   " bytes is shorter than its " + std::to_string(kHeaderBytes) +
                                   "-byte header");
  }
  if (segment[0] != kModeRaw && segment[0] != kModeZstd) {
    return Status::invalidArgument("zstd stage: segment mode byte " + std::to_string(segment[0]) +
                                   " is neither raw (0) nor zstd (1)");
  }
  uint64_t raw = 0;
  std::memcpy(&raw, segment + 1, sizeof(raw));
  *raw_bytes = static_cast<size_t>(raw);
  return Status::ok();
}

Status ZstdStage::decompressSegment(const uint8_t* segment, size_t segment_bytes, void* out,
                                    size_t out_bytes) {
  size_t raw = 0;
  TUTTI_RETURN_IF_ERROR(segmentRawBytes(segment, segment_bytes, &raw));
  if (raw != out_bytes) {
    return Status::invalidArgument("zstd stage: segment holds " + std::to_string(raw) +
                                   " bytes, the receiver expects " + std::to_string(out_bytes));
  }
  const uint8_t* payload = segment + kHeaderBytes;
  const size_t payload_bytes = segment_bytes - kHeaderBytes;
  if (segment[0] == kModeRaw) {
    if (payload_bytes != raw) {
      return Status::invalidArgument("zstd stage: raw segment announces " + std::to_string(raw) +
                                     " bytes but carries " + std::to_string(payload_bytes));
    }
    if (raw > 0) std::memcpy(out, payload, raw);
    return Status::ok();
  }
  const unsigned long long content = ZSTD_getFrameContentSize(payload, payload_bytes);
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN || content != raw) {
    return Status::invalidArgument("zstd stage: compressed segment of " +
                                   std::to_string(payload_bytes) + " bytes has no valid frame of " +
                                   std::to_string(raw) + " bytes");
  }
  const size_t got = ZSTD_decompressDCtx(contexts_->dctx, out, out_bytes, payload, payload_bytes);
  if (ZSTD_isError(got)) {
    ZSTD_DCtx_reset(contexts_->dctx, ZSTD_reset_session_only);
    return Status::invalidArgument(std::string("zstd stage: corrupt compressed segment: ") +
                                   ZSTD_getErrorName(got));
  }
  if (got != raw) {
    return Status::invalidArgument("zstd stage: compressed segment decoded to " +
                                   std::to_string(got) + " bytes, expected " + std::to_string(raw));
  }
  return Status::ok();
}

}  // namespace tutti

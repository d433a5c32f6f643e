#include "ops/tcp/zstd_link.h"

#include <algorithm>
#include <cstring>

namespace tutti {

namespace {

std::string levelKey(int rank) {
  return "rank/" + std::to_string(rank) + "/zstd_level";
}

}  // namespace

Status publishZstdLevel(Store& store, int rank, int level) {
  const std::string v = std::to_string(level);
  return store.set(levelKey(rank), std::vector<uint8_t>(v.begin(), v.end()));
}

Status checkZstdLevel(Store& store, int rank, int size, int level, double timeout_s) {
  // Every peer published its level before its address, hence before it
  // connected to us: the keys are there once the mesh is connected.
  const auto timeout =
      std::chrono::milliseconds(std::max<int64_t>(1000, static_cast<int64_t>(timeout_s * 1000.0)));
  for (int r = 0; r < size; ++r) {
    if (r == rank || (rank != 0 && r != 0)) continue;
    std::vector<uint8_t> v;
    TUTTI_RETURN_IF_ERROR(store.get(levelKey(r), timeout, &v));
    const std::string theirs(v.begin(), v.end());
    if (theirs != std::to_string(level)) {
      return Status::invalidArgument(
          "TUTTI_COMPRESSION_ZSTD_LEVEL is " + std::to_string(level) + " on rank " +
          std::to_string(rank) + " but " + theirs + " on rank " + std::to_string(r) +
          ": every rank of a job must use the same level (tuttirun gives all ranks the "
          "same environment; set it there, or in every rank's environment)");
    }
  }
  return Status::ok();
}

Status ZstdLink::create(int my_rank, int peer, std::shared_ptr<tcp::socket> socket, LinkHost& host,
                        int level, std::unique_ptr<Link>* out) {
  ZstdStageOptions options;
  options.level = level;
  options.min_saving = kWireMinSaving;
  options.min_segment_bytes = 256;
  options.initial_backoff_segments = 8;
  options.max_backoff_segments = 64;  // re-probe at least every 64 frames
  std::unique_ptr<ZstdStage> stage;
  TUTTI_RETURN_IF_ERROR(ZstdStage::create(options, &stage));
  out->reset(new ZstdLink(my_rank, peer, std::move(socket), host, level, std::move(stage)));
  return Status::ok();
}

ZstdLink::ZstdLink(int my_rank, int peer, std::shared_ptr<tcp::socket> socket, LinkHost& host,
                   int level, std::unique_ptr<ZstdStage> stage)
    : SocketLink(peer, std::move(socket), host),
      my_rank_(my_rank),
      level_(level),
      stage_(std::move(stage)) {}

void ZstdLink::start(bool send) {
  if (send) {
    startSend();
  } else {
    startRecv();
  }
}

void ZstdLink::failWire(const std::string& what) {
  fail(Status::peerLost("rank " + std::to_string(peer()) + " sent a data frame this rank (" +
                        std::to_string(my_rank_) + ", zstd level " + std::to_string(level_) +
                        ") cannot take: " + what));
}

// ---- sending ----------------------------------------------------------------

void ZstdLink::startSend() {
  if (send_active_ || sends_.empty() || !open()) return;
  Op& op = sends_.front();
  const size_t n = std::min(op.bytes - op.done, kWireFrameBytes);
  const uint8_t* data = op.data + op.done;
  send_frame_.resize(kWireLengthBytes);
  bool raw = true;
  Status st = stage_->appendSegment(data, n, &send_frame_, &raw);
  if (!st.isOk()) {
    return fail(Status::internal("zstd on the connection to rank " + std::to_string(peer()) + ": " +
                                 st.message()));
  }
  const auto length = static_cast<uint32_t>(send_frame_.size() - kWireLengthBytes + (raw ? n : 0));
  setFrameLength(send_frame_.data(), length);
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(send_frame_),
                                                  asio::buffer(data, raw ? n : 0)};
  send_active_ = true;
  asio::async_write(socket(), buffers, completion(&send_active_, [this, n, raw](size_t written) {
                      TcpWireStats& wire = host().wireStats();
                      wire.payload_bytes += n;
                      wire.socket_bytes += written;
                      ++wire.frames;
                      if (!raw) ++wire.compressed_frames;
                      advance(sends_, n);
                      startSend();
                    }));
}

// ---- receiving --------------------------------------------------------------

void ZstdLink::deliverDecoded() {
  while (decoded_at_ < decoded_.size() && !recvs_.empty()) {
    Op& op = recvs_.front();
    const size_t n = std::min(decoded_.size() - decoded_at_, op.bytes - op.done);
    std::memcpy(op.data + op.done, decoded_.data() + decoded_at_, n);
    decoded_at_ += n;
    advance(recvs_, n);
  }
  if (decoded_at_ == decoded_.size()) {
    decoded_.clear();
    decoded_at_ = 0;
  }
}

void ZstdLink::startRecv() {
  if (recv_active_ || !open()) return;
  deliverDecoded();
  if (recvs_.empty()) return;
  Op& op = recvs_.front();
  recv_active_ = true;
  if (raw_left_ > 0) {
    const size_t want = std::min(raw_left_, op.bytes - op.done);
    socket().async_read_some(asio::buffer(op.data + op.done, want),
                             completion(&recv_active_, [this](size_t n) {
                               raw_left_ -= n;
                               advance(recvs_, n);
                               startRecv();
                             }));
    return;
  }
  asio::async_read(socket(), asio::buffer(recv_header_),
                   completion(&recv_active_, [this](size_t) { onHeader(); }));
}

void ZstdLink::onHeader() {
  if (!open()) return;
  const uint32_t length = frameLength(recv_header_.data());
  const uint8_t* segment = recv_header_.data() + kWireLengthBytes;
  size_t raw = 0;
  Status st = ZstdStage::segmentRawBytes(segment, ZstdStage::kHeaderBytes, &raw);
  if (!st.isOk()) return failWire(st.message());
  if (raw == 0 || raw > kWireFrameBytes || length < ZstdStage::kHeaderBytes) {
    return failWire("a frame of " + std::to_string(length) + " bytes announcing " +
                    std::to_string(raw) + " raw bytes (at most " + std::to_string(kWireFrameBytes) +
                    ")");
  }
  const size_t payload = length - ZstdStage::kHeaderBytes;
  if (segment[0] == ZstdStage::kModeRaw) {
    if (payload != raw) {
      return failWire("a raw frame announcing " + std::to_string(raw) + " bytes but carrying " +
                      std::to_string(payload));
    }
    raw_left_ = raw;
    return startRecv();
  }
  if (payload == 0 || payload >= raw) {
    return failWire("a zstd frame of " + std::to_string(payload) + " bytes for " +
                    std::to_string(raw) + " raw bytes (it must be smaller)");
  }
  recv_segment_.resize(length);
  std::memcpy(recv_segment_.data(), segment, ZstdStage::kHeaderBytes);
  recv_active_ = true;
  asio::async_read(socket(), asio::buffer(recv_segment_.data() + ZstdStage::kHeaderBytes, payload),
                   completion(&recv_active_, [this, raw](size_t) { onPayload(raw); }));
}

void ZstdLink::onPayload(size_t raw) {
  if (!open()) return;
  // The header was read for the front receive, which nothing but this
  // link's handlers completes: it is still there.
  Op& op = recvs_.front();
  const bool direct = op.bytes - op.done >= raw;
  uint8_t* out = op.data + op.done;
  if (!direct) {
    decoded_.resize(raw);
    decoded_at_ = 0;
    out = decoded_.data();
  }
  Status st = stage_->decompressSegment(recv_segment_.data(), recv_segment_.size(), out, raw);
  if (!st.isOk()) {
    decoded_.clear();
    return failWire(st.message());
  }
  if (direct) advance(recvs_, raw);
  startRecv();
}

}  // namespace tutti

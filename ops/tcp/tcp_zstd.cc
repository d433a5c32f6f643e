// zstd on the wire of TcpTransport: frames on the data sockets of TCP peers
// (the frame format and the rules are in tcp_transport_impl.h).
//
// Sending: the front send's next frame is encoded when the previous frame is
// written (on this thread, inside post() or a handler), so encoding one frame
// overlaps with the kernel moving the previous one. A raw frame is written
// from the caller's buffer behind its header (no copy).
//
// Receiving: the header is read only while a receive is posted (as on the
// plain path); a raw frame's bytes go straight into the posted buffers; a zstd
// frame is read whole, then decoded into the posted buffer when it fits there
// (the common case: the peer's send and our receive have the same size), else
// into `decoded`, which later receives drain.

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "core/logging.h"
#include "ops/tcp/tcp_transport_impl.h"

namespace tutti {

using boost::system::error_code;

namespace {

std::string levelKey(int rank) {
  return "rank/" + std::to_string(rank) + "/zstd_level";
}

}  // namespace

Status TcpTransportImpl::publishZstdLevel(Store& store) {
  const std::string v = std::to_string(zstd_level_);
  return store.set(levelKey(rank_), std::vector<uint8_t>(v.begin(), v.end()));
}

Status TcpTransportImpl::checkZstdLevel(Store& store) {
  // Every peer published its level before its address, hence before it
  // connected to us: the keys are there once connectAll() succeeded.
  const auto timeout =
      std::chrono::milliseconds(std::max<int64_t>(1000, static_cast<int64_t>(timeout_s_ * 1000.0)));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || (rank_ != 0 && r != 0)) continue;
    std::vector<uint8_t> v;
    TUTTI_RETURN_IF_ERROR(store.get(levelKey(r), timeout, &v));
    const std::string theirs(v.begin(), v.end());
    if (theirs != std::to_string(zstd_level_)) {
      return Status::invalidArgument(
          "TUTTI_COMPRESSION_ZSTD_LEVEL is " + std::to_string(zstd_level_) + " on rank " +
          std::to_string(rank_) + " but " + theirs + " on rank " + std::to_string(r) +
          ": every rank of a job must use the same level (tuttirun gives all ranks the "
          "same environment; set it there, or in every rank's environment)");
    }
  }
  return Status::ok();
}

Status TcpTransportImpl::enableZstd() {
  if (zstd_level_ <= 0) return Status::ok();
  ZstdStageOptions options;
  options.level = zstd_level_;
  options.min_saving = kWireMinSaving;
  options.min_segment_bytes = 256;
  options.initial_backoff_segments = 8;
  options.max_backoff_segments = 64;  // re-probe at least every 64 frames
  for (int r = 0; r < size_; ++r) {
    Peer& p = peers_[r];
    if (r == rank_ || p.shm || !p.data) continue;
    TUTTI_RETURN_IF_ERROR(ZstdStage::create(options, &p.zstd));
  }
  return Status::ok();
}

void TcpTransportImpl::breakWire(int peer, const std::string& what) {
  breakWith(Status::peerLost("rank " + std::to_string(peer) + " sent a data frame this rank (" +
                             std::to_string(rank_) + ", zstd level " + std::to_string(zstd_level_) +
                             ") cannot take: " + what),
            peer);
}

// ---- sending ----------------------------------------------------------------

void TcpTransportImpl::startSendFramed(int peer) {
  Peer& p = peers_[peer];
  if (p.send_active || p.sends.empty() || !broken_.isOk()) return;
  Op& op = p.sends.front();
  const size_t n = std::min(op.bytes - op.done, kWireFrameBytes);
  const uint8_t* data = op.data + op.done;
  p.send_frame.resize(kWireLengthBytes);
  bool raw = true;
  Status st = p.zstd->appendSegment(data, n, &p.send_frame, &raw);
  if (!st.isOk()) {
    return breakWith(Status::internal("zstd on the connection to rank " + std::to_string(peer) +
                                      ": " + st.message()),
                     peer);
  }
  const auto length = static_cast<uint32_t>(p.send_frame.size() - kWireLengthBytes + (raw ? n : 0));
  setFrameLength(p.send_frame.data(), length);
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(p.send_frame),
                                                  asio::buffer(data, raw ? n : 0)};
  p.send_active = true;
  asio::async_write(*p.data, buffers, [this, peer, n, raw](const error_code& ec, size_t written) {
    Peer& q = peers_[peer];
    q.send_active = false;
    if (ec) return breakOn(peer, ec);
    q.last_progress = Clock::now();
    wire_.payload_bytes += n;
    wire_.socket_bytes += written;
    ++wire_.frames;
    if (!raw) ++wire_.compressed_frames;
    advance(q.sends, n);
    startSendFramed(peer);
  });
}

// ---- receiving --------------------------------------------------------------

void TcpTransportImpl::deliverDecoded(int peer) {
  Peer& p = peers_[peer];
  while (p.decoded_at < p.decoded.size() && !p.recvs.empty()) {
    Op& op = p.recvs.front();
    const size_t n = std::min(p.decoded.size() - p.decoded_at, op.bytes - op.done);
    std::memcpy(op.data + op.done, p.decoded.data() + p.decoded_at, n);
    p.decoded_at += n;
    advance(p.recvs, n);
  }
  if (p.decoded_at == p.decoded.size()) {
    p.decoded.clear();
    p.decoded_at = 0;
  }
}

void TcpTransportImpl::startRecvFramed(int peer) {
  Peer& p = peers_[peer];
  if (p.recv_active || !broken_.isOk()) return;
  deliverDecoded(peer);
  if (p.recvs.empty()) return;
  Op& op = p.recvs.front();
  p.recv_active = true;
  if (p.raw_left > 0) {
    const size_t want = std::min(p.raw_left, op.bytes - op.done);
    p.data->async_read_some(asio::buffer(op.data + op.done, want),
                            [this, peer](const error_code& ec, size_t n) {
                              Peer& q = peers_[peer];
                              q.recv_active = false;
                              if (ec) return breakOn(peer, ec);
                              q.last_progress = Clock::now();
                              q.raw_left -= n;
                              advance(q.recvs, n);
                              startRecvFramed(peer);
                            });
    return;
  }
  asio::async_read(*p.data, asio::buffer(p.recv_header),
                   [this, peer](const error_code& ec, size_t) {
                     Peer& q = peers_[peer];
                     q.recv_active = false;
                     if (ec) return breakOn(peer, ec);
                     q.last_progress = Clock::now();
                     onFrameHeader(peer);
                   });
}

void TcpTransportImpl::onFrameHeader(int peer) {
  Peer& p = peers_[peer];
  const uint32_t length = frameLength(p.recv_header.data());
  const uint8_t* segment = p.recv_header.data() + kWireLengthBytes;
  size_t raw = 0;
  Status st = ZstdStage::segmentRawBytes(segment, ZstdStage::kHeaderBytes, &raw);
  if (!st.isOk()) return breakWire(peer, st.message());
  if (raw == 0 || raw > kWireFrameBytes || length < ZstdStage::kHeaderBytes) {
    return breakWire(peer, "a frame of " + std::to_string(length) + " bytes announcing " +
                               std::to_string(raw) + " raw bytes (at most " +
                               std::to_string(kWireFrameBytes) + ")");
  }
  const size_t payload = length - ZstdStage::kHeaderBytes;
  if (segment[0] == ZstdStage::kModeRaw) {
    if (payload != raw) {
      return breakWire(peer, "a raw frame announcing " + std::to_string(raw) +
                                 " bytes but carrying " + std::to_string(payload));
    }
    p.raw_left = raw;
    return startRecvFramed(peer);
  }
  if (payload == 0 || payload >= raw) {
    return breakWire(peer, "a zstd frame of " + std::to_string(payload) + " bytes for " +
                               std::to_string(raw) + " raw bytes (it must be smaller)");
  }
  p.recv_segment.resize(length);
  std::memcpy(p.recv_segment.data(), segment, ZstdStage::kHeaderBytes);
  p.recv_active = true;
  asio::async_read(*p.data, asio::buffer(p.recv_segment.data() + ZstdStage::kHeaderBytes, payload),
                   [this, peer, raw](const error_code& ec, size_t) {
                     Peer& q = peers_[peer];
                     q.recv_active = false;
                     if (ec) return breakOn(peer, ec);
                     q.last_progress = Clock::now();
                     onFramePayload(peer, raw);
                   });
}

void TcpTransportImpl::onFramePayload(int peer, size_t raw) {
  Peer& p = peers_[peer];
  // The header was read for the front receive, which nothing but this
  // connection's handlers completes: it is still there.
  Op& op = p.recvs.front();
  const bool direct = op.bytes - op.done >= raw;
  uint8_t* out = op.data + op.done;
  if (!direct) {
    p.decoded.resize(raw);
    p.decoded_at = 0;
    out = p.decoded.data();
  }
  Status st = p.zstd->decompressSegment(p.recv_segment.data(), p.recv_segment.size(), out, raw);
  if (!st.isOk()) {
    p.decoded.clear();
    return breakWire(peer, st.message());
  }
  if (direct) advance(p.recvs, raw);
  startRecvFramed(peer);
}

}  // namespace tutti

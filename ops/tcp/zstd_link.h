#pragma once

// zstd on the wire of the TCP transport: a SocketLink whose byte stream is
// cut into frames (used with settings.compression_zstd_level > 0 for every
// TCP peer; shared-memory peers never frame). It decorates the socket link:
// same connection, same state and failure handling, only what goes on the
// wire differs. Not a public interface.
//
// Frame: u32 length (of what follows it; core/wire.h's frame header), then a
// ZstdStage segment (ops/tcp/zstd_stage.h): u8 mode (raw / zstd), u64 raw
// bytes, and the raw bytes or one checksummed zstd frame. A send is cut into
// frames of at most kWireFrameBytes raw bytes; the link's ZstdStage decides
// per frame whether compressing pays (>= kWireMinSaving) from its running
// ratio and re-probes after backing off. A raw frame is written from the
// caller's buffer behind its header (no copy); the next frame is encoded when
// the previous one was written, so encoding overlaps with the kernel moving
// the previous frame.
//
// Receiving: the header is read only while a receive is posted; a raw
// frame's bytes go straight into the posted buffers; a zstd frame is read
// whole, then decoded into the posted buffer when it fits there (the common
// case: the peer's send and our receive have the same size), else into a
// buffer that later receives drain. Frames are a stream: one may end inside a
// posted receive or span several. A frame it cannot take (bad mode, sizes out
// of bounds, a corrupt zstd frame) fails the link with kPeerLost naming the
// peer; nothing is written past a posted buffer.
//
// Threading: as Link.

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/store.h"
#include "core/wire.h"
#include "ops/tcp/link.h"
#include "ops/tcp/zstd_stage.h"

namespace tutti {

// The length field, the whole frame header, the most raw bytes one frame
// carries (sender and receiver), and the saving a zstd frame must bring to
// be sent instead of the raw bytes.
constexpr size_t kWireLengthBytes = kFrameHeaderBytes;
constexpr size_t kWireHeaderBytes = kWireLengthBytes + ZstdStage::kHeaderBytes;
constexpr size_t kWireFrameBytes = 1u << 20;
constexpr double kWireMinSaving = 0.10;

class ZstdLink final : public SocketLink {
 public:
  // `level`: the job's zstd level (> 0); it and this rank `my_rank` are
  // named in error messages.
  static Status create(int my_rank, int peer, std::shared_ptr<tcp::socket> socket, LinkHost& host,
                       int level, std::unique_ptr<Link>* out);

 protected:
  void start(bool send) override;

 private:
  ZstdLink(int my_rank, int peer, std::shared_ptr<tcp::socket> socket, LinkHost& host, int level,
           std::unique_ptr<ZstdStage> stage);
  void startSend();
  void startRecv();
  void onHeader();
  void onPayload(size_t raw);
  void deliverDecoded();
  // A frame this rank cannot take: kPeerLost naming the peer and `what`.
  void failWire(const std::string& what);

  int my_rank_;
  int level_;
  std::unique_ptr<ZstdStage> stage_;
  std::vector<uint8_t> send_frame_;  // length and segment header (+ zstd frame) being written
  std::array<uint8_t, kWireHeaderBytes> recv_header_{};
  std::vector<uint8_t> recv_segment_;  // segment header + zstd frame being read
  std::vector<uint8_t> decoded_;       // a decoded frame longer than its receive
  size_t decoded_at_ = 0;              // bytes of decoded_ already delivered
  size_t raw_left_ = 0;                // bytes of the raw frame being read still to come
};

// Every rank publishes its level ("rank/<r>/zstd_level") before its address;
// after connecting, rank 0 compares against every rank, the others against
// rank 0: kInvalidArgument naming both ranks and both levels when they
// differ. `timeout_s`: the transport's timeout (at least 1 s is waited).
Status publishZstdLevel(Store& store, int rank, int level);
Status checkZstdLevel(Store& store, int rank, int size, int level, double timeout_s);

}  // namespace tutti

#pragma once

// The shared-memory path of TcpTransport for two ranks on the same host: one
// segment per rank pair holding two single-producer/single-consumer byte
// rings (one per direction) and a "sleeping" flag per side. Bytes are a
// stream, exactly as on the TCP data socket: no headers, no message
// boundaries; the transport's op queues cut the stream into messages.
//
// Segment: created by the lower rank of the pair with shm_open(O_CREAT |
// O_EXCL, 0600) under a random name "/tutti-<pid>-<32 hex>" that travels to
// the higher rank over the pair's authenticated TCP connection; the higher
// rank opens and maps it, checks owner, mode, size and header, and unlinks
// the name at once; the lower rank unlinks it again when the higher rank has
// answered (or failed). Nothing stays in /dev/shm after setup, whatever
// happens to the processes later. The mapping lives until the channel is
// destroyed, so a peer that dies never invalidates our memory.
//
// Ring protocol: `head` counts bytes ever written (producer only), `tail`
// bytes ever read (consumer only); release on publish, acquire on observe.
// Wake-ups: a side about to sleep in epoll sets its flag (seq_cst) and looks
// again; a side that publishes data or frees space then reads the other's
// flag (seq_cst) and, if it was set, clears it and must ring the peer's
// doorbell (one byte on the TCP connection; see shm_link.h). The seq_cst
// pair makes sure one of the two sides sees the other: no lost wake-up.
//
// Threading: a ShmChannel is used by one thread (the transport's); the peer
// process (or thread) uses its own ShmChannel over the same segment.
// Nothing blocks. Errors are Status values (kIoError) with the system
// error's text; a ring whose counters are impossible (a corrupted or hostile
// segment) is reported by write()/read() returning false.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace tutti {

// Bytes of each direction's ring. Measured (np2 allreduce 1-64 MiB, 2-core
// EPYC, loaded): 512 KiB-2 MiB beat 4 MiB, which leaves the caches.
constexpr size_t kShmRingBytes = 1u << 20;
// Largest ring accepted from a peer's offer.
constexpr size_t kShmMaxRingBytes = 256u << 20;

// Control words of one ring, each on its own cache line.
struct ShmRingControl {
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint64_t> tail{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

// One direction of a channel: a view of a control block and `capacity` data
// bytes (any capacity > 0; both live in memory the caller owns). Producer
// calls and consumer calls may run on different threads or processes.
class ShmRing {
 public:
  ShmRing() = default;
  ShmRing(ShmRingControl* control, uint8_t* data, size_t capacity)
      : control_(control), data_(data), capacity_(capacity) {}

  size_t capacity() const { return capacity_; }
  // Producer: copies up to `bytes` from `src` into free space; returns the
  // count copied (0 when full), or kCorrupt if the counters are impossible.
  size_t write(const uint8_t* src, size_t bytes);
  // Consumer: copies up to `bytes` of available data into `dst`.
  size_t read(uint8_t* dst, size_t bytes);
  // Bytes readable now (consumer) / writable now (producer).
  size_t readable() const;
  size_t writable() const;

  static constexpr size_t kCorrupt = ~size_t{0};

 private:
  ShmRingControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

// A mapped segment and this side's view of it.
class ShmChannel {
 public:
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // Lower rank: creates and maps a new segment with two rings of
  // `ring_bytes`; *name is what the peer needs to open it. The name stays
  // linked until unlinkName() (call it once the peer answered).
  static Status create(size_t ring_bytes, std::string* name, std::unique_ptr<ShmChannel>* out);
  // Higher rank: opens, checks, maps and unlinks the segment `name`.
  static Status open(const std::string& name, size_t ring_bytes, std::unique_ptr<ShmChannel>* out);
  // Removes a segment's name; no error if it is already gone.
  static void unlinkName(const std::string& name);

  ShmRing& tx() { return tx_; }
  ShmRing& rx() { return rx_; }
  // This side is about to sleep until the peer moves (seq_cst store) / woke.
  void setSleeping(bool sleeping);
  // True (and the flag cleared) if the peer had said it sleeps: the caller
  // must then ring the peer's doorbell.
  bool takePeerSleeping();

 private:
  ShmChannel(void* base, size_t bytes, size_t ring_bytes, bool creator);
  void* base_;
  size_t bytes_;
  ShmRing tx_, rx_;
  std::atomic<uint32_t>* my_flag_;
  std::atomic<uint32_t>* peer_flag_;
};

// "<boot id>|<hostname>|<uid>|<network namespace>": equal for two processes
// that can share memory through /dev/shm (open() still checks) and are meant
// to be on one host (the same network namespace). Empty if unknown.
std::string shmHostIdentity();

}  // namespace tutti

#pragma once

// Little-endian binary encoding for wire messages, the one place where bytes
// on the wire are packed and unpacked: serialized messages, length-prefixed
// frames (rendezvous requests and replies, transport control messages, zstd
// frames) and fixed-size records (the connection hello, the shared-memory
// offer). BufferReader checks every read against the remaining bytes, so
// malformed input from the network is an error value, never a crash or an
// over-read.

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {

class BufferWriter {
 public:
  void putU8(uint8_t v) { putRaw(&v, 1); }
  void putU32(uint32_t v) { putRaw(&v, 4); }
  void putI32(int32_t v) { putRaw(&v, 4); }
  void putI64(int64_t v) { putRaw(&v, 8); }
  void putU64(uint64_t v) { putRaw(&v, 8); }
  void putDouble(double v) { putRaw(&v, 8); }
  void putString(const std::string& s) {
    putU32(static_cast<uint32_t>(s.size()));
    putRaw(s.data(), s.size());
  }
  void putI64Vector(const std::vector<int64_t>& v) {
    putU32(static_cast<uint32_t>(v.size()));
    putRaw(v.data(), v.size() * sizeof(int64_t));
  }
  void putRaw(const void* p, size_t n) {
    if (n == 0) return;
    // resize + memcpy rather than insert(): GCC 12 at -O3 reports a false
    // -Wstringop-overflow for vector::insert of a few bytes.
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    std::memcpy(bytes_.data() + at, p, n);
  }
  // Zero bytes up to a total of `n` (fixed-size records); nothing when the
  // writer holds `n` bytes or more already.
  void padTo(size_t n) {
    if (bytes_.size() < n) bytes_.resize(n, 0);
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class BufferReader {
 public:
  BufferReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  explicit BufferReader(const std::vector<uint8_t>& v) : BufferReader(v.data(), v.size()) {}

  bool getU8(uint8_t* v) { return getRaw(v, 1); }
  bool getU32(uint32_t* v) { return getRaw(v, 4); }
  bool getI32(int32_t* v) { return getRaw(v, 4); }
  bool getI64(int64_t* v) { return getRaw(v, 8); }
  bool getU64(uint64_t* v) { return getRaw(v, 8); }
  bool getDouble(double* v) { return getRaw(v, 8); }
  bool getString(std::string* s, size_t max_len = 1 << 20) {
    uint32_t n = 0;
    if (!getU32(&n) || n > max_len || n > remaining()) return false;
    s->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }
  bool getI64Vector(std::vector<int64_t>* v, size_t max_len = 1 << 24) {
    uint32_t n = 0;
    if (!getU32(&n) || n > max_len || static_cast<size_t>(n) * 8 > remaining()) return false;
    v->resize(n);
    return getRaw(v->data(), static_cast<size_t>(n) * 8);
  }
  bool getRaw(void* p, size_t n) {
    if (n > remaining()) return false;
    if (n == 0) return true;  // p may be null (an empty vector's data()): memcpy's UB
    std::memcpy(p, data_ + pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return size_ - pos_; }
  bool atEnd() const { return pos_ == size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Length-prefixed frames: a u32 body length, then the body.
constexpr size_t kFrameHeaderBytes = 4;
using FrameHeader = std::array<uint8_t, kFrameHeaderBytes>;

// Header and body in one buffer, ready to write.
inline std::vector<uint8_t> framed(const void* body, size_t n) {
  BufferWriter w;
  w.putU32(static_cast<uint32_t>(n));
  w.putRaw(body, n);
  return w.take();
}
inline std::vector<uint8_t> framed(const std::vector<uint8_t>& body) {
  return framed(body.data(), body.size());
}

// The body length the kFrameHeaderBytes at `header` announce (the caller
// bounds it).
inline uint32_t frameLength(const uint8_t* header) {
  uint32_t n = 0;
  BufferReader(header, kFrameHeaderBytes).getU32(&n);
  return n;
}
inline uint32_t frameLength(const FrameHeader& header) {
  return frameLength(header.data());
}

// Writes a frame header in place, for a frame whose body length is known only
// once the body is built behind it.
inline void setFrameLength(uint8_t* header, uint32_t n) {
  BufferWriter w;
  w.putU32(n);
  std::memcpy(header, w.bytes().data(), kFrameHeaderBytes);
}

}  // namespace tutti

#pragma once

// Wire protocol between RendezvousClient and RendezvousServer, after the auth
// handshake. Every message is a frame: u32 little-endian body length, then
// the body. Strictly request/response: a client sends the next request only
// after the answer to the previous one.
//
//   request  SET: u8 kSet, string key, string value   -> reply: u8 kReplyOk
//   request  GET: u8 kGet, string key                 -> reply: u8 kReplyOk, string value
//                 (the server answers once the key exists; the client times out)
//   request  TRYGET: u8 kTryGet, string key           -> reply: u8 kReplyOk, u8 found, string value
//                 (answered at once; value empty when not found)
//   (string = u32 length + bytes)
//
// Anything else (unknown op, trailing bytes, oversize frame, a request while a
// GET is pending) makes the server drop the connection.

#include <cstddef>
#include <cstdint>

namespace tutti::rendezvous {

constexpr uint8_t kSet = 1;
constexpr uint8_t kGet = 2;
constexpr uint8_t kTryGet = 3;
constexpr uint8_t kReplyOk = 0;
constexpr size_t kMaxFrameBytes = 16u << 20;  // 16 MiB
constexpr size_t kMaxKeyBytes = 4096;

}  // namespace tutti::rendezvous

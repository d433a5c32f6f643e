// Fuzzes what a rank accepts from the peer that offers shared memory
// (ops/tcp/peer_records.h, ops/tcp/shm_channel.h): the 70-byte offer, and
// the segment the peer created, whose header and ring counters it controls.
// Input: the offer, then bytes written over a real segment's header (magic,
// ring size, sleeping flags, ring counters) before this side opens it, then
// bytes this side tries to send through the ring. Checks: a foreign name or
// ring size is refused; a hostile header is refused or, if accepted, the
// rings never read or write outside the segment (kCorrupt or a bounded
// count), whatever the counters say.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ops/tcp/peer_records.h"
#include "ops/tcp/shm_channel.h"
#include "tests/fuzz/fuzz_check.h"

using namespace tutti;

namespace {

constexpr size_t kRing = 4096;  // small: a segment per input stays cheap

// Overwrites the first bytes of segment `name` as a hostile creator would.
void scribble(const std::string& name, const uint8_t* data, size_t size) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  FUZZ_CHECK(fd >= 0);
  void* base = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  FUZZ_CHECK(base != MAP_FAILED);
  std::memcpy(base, data, std::min<size_t>(size, 4096));
  munmap(base, 4096);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kShmOfferBytes) return 0;
  std::array<uint8_t, kShmOfferBytes> bytes{};
  std::memcpy(bytes.data(), data, kShmOfferBytes);
  const ShmOffer offer = decodeShmOffer(bytes);
  FUZZ_CHECK(offer.name.size() <= kShmNameField);
  FUZZ_CHECK(encodeShmOffer(offer) == bytes || bytes[0] > 1 || bytes[5] > kShmNameField ||
             std::any_of(bytes.begin() + 6 + offer.name.size(), bytes.end(),
                         [](uint8_t b) { return b != 0; }));
  // The offer as received: names that are not ours are refused before any
  // system call; ours (random, never guessed) simply do not exist.
  if (offer.ok) {
    std::unique_ptr<ShmChannel> channel;
    Status st = ShmChannel::open(offer.name, offer.ring_bytes, &channel);
    FUZZ_CHECK(!st.isOk() && st.code() == StatusCode::kIoError);
  }
  // A segment whose creator wrote garbage into it.
  const uint8_t* rest = data + kShmOfferBytes;
  const size_t rest_size = size - kShmOfferBytes;
  const size_t header_bytes = std::min<size_t>(rest_size, rest_size > 0 ? rest[0] * 2 : 0);
  std::string name;
  std::unique_ptr<ShmChannel> creator, opener;
  FUZZ_CHECK(ShmChannel::create(kRing, &name, &creator).isOk());
  if (header_bytes > 1) scribble(name, rest + 1, header_bytes - 1);
  Status st = ShmChannel::open(name, kRing, &opener);
  ShmChannel::unlinkName(name);
  if (!st.isOk()) return 0;
  const uint8_t* payload = rest + header_bytes;
  const size_t payload_size = rest_size - header_bytes;
  std::vector<uint8_t> buf(2 * kRing);
  for (ShmRing* ring : {&opener->tx(), &opener->rx(), &creator->tx(), &creator->rx()}) {
    const size_t r = ring->readable(), w = ring->writable();
    FUZZ_CHECK(r <= kRing && w <= kRing);
    const size_t wrote = ring->write(payload, payload_size);
    FUZZ_CHECK(wrote == ShmRing::kCorrupt || wrote <= std::min(payload_size, kRing));
    const size_t read = ring->read(buf.data(), buf.size());
    FUZZ_CHECK(read == ShmRing::kCorrupt || read <= kRing);
  }
  opener->setSleeping(true);
  creator->takePeerSleeping();
  return 0;
}

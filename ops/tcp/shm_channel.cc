#include "ops/tcp/shm_channel.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>

#include "rendezvous/auth.h"

namespace tutti {
namespace {

constexpr uint64_t kSegmentMagic = 0x314d485349545554ull;  // "TUTTISHM1" (8 bytes)
constexpr const char* kNamePrefix = "/tutti-";
constexpr size_t kPage = 4096;

struct alignas(64) FlagLine {
  std::atomic<uint32_t> value{0};
};

// The start of every segment; the two rings' data follow at kDataOffset.
struct SegmentHeader {
  uint64_t magic = kSegmentMagic;
  uint64_t ring_bytes = 0;
  FlagLine sleeping[2];    // [0] the creator (lower rank), [1] the opener
  ShmRingControl ring[2];  // [0] creator -> opener, [1] opener -> creator
};

constexpr size_t kDataOffset = (sizeof(SegmentHeader) + kPage - 1) / kPage * kPage;

size_t segmentBytes(size_t ring_bytes) {
  return kDataOffset + 2 * ((ring_bytes + kPage - 1) / kPage * kPage);
}

Status sysError(const std::string& what, const std::string& name, int err) {
  return Status::ioError("shared memory: " + what + " " + name + ": " + std::strerror(err));
}

std::string randomName() {
  auth::Nonce nonce = auth::randomNonce();
  static const char kHex[] = "0123456789abcdef";
  std::string name = kNamePrefix + std::to_string(getpid()) + "-";
  for (size_t i = 0; i < 16; ++i) {
    name += kHex[nonce[i] >> 4];
    name += kHex[nonce[i] & 15];
  }
  return name;
}

// A peer-supplied name must be one of ours: "/tutti-" and no other '/'.
bool plausibleName(const std::string& name) {
  return name.size() < 200 && name.rfind(kNamePrefix, 0) == 0 &&
         name.find('/', 1) == std::string::npos;
}

}  // namespace

// ---- ShmRing ----------------------------------------------------------------

size_t ShmRing::readable() const {
  const uint64_t head = control_->head.load(std::memory_order_acquire);
  const uint64_t tail = control_->tail.load(std::memory_order_relaxed);
  return head - tail > capacity_ ? 0 : static_cast<size_t>(head - tail);
}

size_t ShmRing::writable() const {
  const uint64_t head = control_->head.load(std::memory_order_relaxed);
  const uint64_t tail = control_->tail.load(std::memory_order_acquire);
  return head - tail > capacity_ ? 0 : capacity_ - static_cast<size_t>(head - tail);
}

size_t ShmRing::write(const uint8_t* src, size_t bytes) {
  const uint64_t head = control_->head.load(std::memory_order_relaxed);  // ours
  const uint64_t tail = control_->tail.load(std::memory_order_acquire);
  if (head - tail > capacity_) return kCorrupt;
  const size_t n = std::min(bytes, capacity_ - static_cast<size_t>(head - tail));
  if (n == 0) return 0;
  const size_t at = static_cast<size_t>(head % capacity_);
  const size_t first = std::min(n, capacity_ - at);
  std::memcpy(data_ + at, src, first);
  if (n > first) std::memcpy(data_, src + first, n - first);
  control_->head.store(head + n, std::memory_order_release);
  return n;
}

size_t ShmRing::read(uint8_t* dst, size_t bytes) {
  const uint64_t head = control_->head.load(std::memory_order_acquire);
  const uint64_t tail = control_->tail.load(std::memory_order_relaxed);  // ours
  if (head - tail > capacity_) return kCorrupt;
  const size_t n = std::min(bytes, static_cast<size_t>(head - tail));
  if (n == 0) return 0;
  const size_t at = static_cast<size_t>(tail % capacity_);
  const size_t first = std::min(n, capacity_ - at);
  std::memcpy(dst, data_ + at, first);
  if (n > first) std::memcpy(dst + first, data_, n - first);
  control_->tail.store(tail + n, std::memory_order_release);
  return n;
}

// ---- ShmChannel -------------------------------------------------------------

ShmChannel::ShmChannel(void* base, size_t bytes, size_t ring_bytes, bool creator)
    : base_(base), bytes_(bytes) {
  auto* header = static_cast<SegmentHeader*>(base);
  auto* data = static_cast<uint8_t*>(base) + kDataOffset;
  const size_t stride = segmentBytes(ring_bytes) - kDataOffset;
  ShmRing r0(&header->ring[0], data, ring_bytes);
  ShmRing r1(&header->ring[1], data + stride / 2, ring_bytes);
  tx_ = creator ? r0 : r1;
  rx_ = creator ? r1 : r0;
  my_flag_ = &header->sleeping[creator ? 0 : 1].value;
  peer_flag_ = &header->sleeping[creator ? 1 : 0].value;
}

ShmChannel::~ShmChannel() {
  munmap(base_, bytes_);
}

Status ShmChannel::create(size_t ring_bytes, std::string* name, std::unique_ptr<ShmChannel>* out) {
  if (ring_bytes == 0 || ring_bytes > kShmMaxRingBytes) {
    return Status::invalidArgument("shared memory: ring of " + std::to_string(ring_bytes) +
                                   " bytes");
  }
  const size_t bytes = segmentBytes(ring_bytes);
  *name = randomName();
  int fd = shm_open(name->c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return sysError("cannot create", *name, errno);
  // posix_fallocate, not only ftruncate: a /dev/shm too small for the
  // segment must fail here (and the pair use TCP), not SIGBUS mid-job.
  int err = ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno : 0;
  if (err == 0) err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base = MAP_FAILED;
  if (err == 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) err = errno;
  }
  close(fd);
  if (err != 0) {
    unlinkName(*name);
    return sysError("cannot size or map", *name, err);
  }
  auto* header = new (base) SegmentHeader();
  header->ring_bytes = ring_bytes;
  out->reset(new ShmChannel(base, bytes, ring_bytes, /*creator=*/true));
  return Status::ok();
}

Status ShmChannel::open(const std::string& name, size_t ring_bytes,
                        std::unique_ptr<ShmChannel>* out) {
  if (!plausibleName(name)) return Status::ioError("shared memory: refused name '" + name + "'");
  if (ring_bytes == 0 || ring_bytes > kShmMaxRingBytes) {
    return Status::ioError("shared memory: refused ring size " + std::to_string(ring_bytes));
  }
  const size_t bytes = segmentBytes(ring_bytes);
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return sysError("cannot open", name, errno);
  unlinkName(name);  // mapped or not, the name has served its purpose
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return sysError("cannot stat", name, err);
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0 ||
      static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return Status::ioError("shared memory: " + name + " has owner " + std::to_string(st.st_uid) +
                           ", mode " + std::to_string(st.st_mode & 0777) + ", size " +
                           std::to_string(st.st_size) + "; expected owner " +
                           std::to_string(geteuid()) + ", mode 0600, size " +
                           std::to_string(bytes));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = base == MAP_FAILED ? errno : 0;
  close(fd);
  if (err != 0) return sysError("cannot map", name, err);
  const auto* header = static_cast<const SegmentHeader*>(base);
  if (header->magic != kSegmentMagic || header->ring_bytes != ring_bytes) {
    munmap(base, bytes);
    return Status::ioError("shared memory: " + name + " has a foreign header");
  }
  out->reset(new ShmChannel(base, bytes, ring_bytes, /*creator=*/false));
  return Status::ok();
}

void ShmChannel::unlinkName(const std::string& name) {
  if (!name.empty()) shm_unlink(name.c_str());
}

void ShmChannel::setSleeping(bool sleeping) {
  my_flag_->store(sleeping ? 1 : 0, std::memory_order_seq_cst);
  // Orders the flag before the caller's next look at the rings (see header).
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool ShmChannel::takePeerSleeping() {
  // Orders the caller's last publish (head or tail) before the flag's load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (peer_flag_->load(std::memory_order_relaxed) == 0) return false;
  return peer_flag_->exchange(0, std::memory_order_seq_cst) != 0;
}

std::string shmHostIdentity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  char host[256] = {};
  if (boot.empty() || gethostname(host, sizeof(host) - 1) != 0) return "";
  // Processes in different network namespaces (containers, `ip netns exec`)
  // may share /dev/shm but are meant to be different hosts: they talk TCP.
  char netns[128] = {};
  ssize_t n = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  if (n <= 0) return "";
  return boot + "|" + host + "|" + std::to_string(geteuid()) + "|" + std::string(netns, n);
}

}  // namespace tutti

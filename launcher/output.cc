#include "launcher/output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tutti {
namespace launcher {

bool writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n >= 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      continue;
    }
    return false;
  }
  return true;
}

OutputStream::OutputStream(std::string prefix, int out_fd, int file_fd)
    : prefix_(std::move(prefix)), out_fd_(out_fd), file_fd_(file_fd) {}

OutputStream::~OutputStream() {
  finish();
  if (file_fd_ >= 0) ::close(file_fd_);
}

void OutputStream::writeLine(const char* data, size_t size) {
  std::string line;
  line.reserve(prefix_.size() + size + 1);
  line.append(prefix_).append(data, size).push_back('\n');
  writeAll(out_fd_, line.data(), line.size());
}

void OutputStream::append(const char* data, size_t size) {
  if (file_fd_ >= 0) writeAll(file_fd_, data, size);
  size_t start = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != '\n') continue;
    if (pending_.empty()) {
      writeLine(data + start, i - start);
    } else {
      pending_.append(data + start, i - start);
      writeLine(pending_.data(), pending_.size());
      pending_.clear();
    }
    start = i + 1;
  }
  pending_.append(data + start, size - start);
  while (pending_.size() >= kMaxLine) {
    writeLine(pending_.data(), kMaxLine);
    pending_.erase(0, kMaxLine);
  }
}

void OutputStream::finish() {
  if (pending_.empty()) return;
  writeLine(pending_.data(), pending_.size());
  pending_.clear();
}

}  // namespace launcher
}  // namespace tutti

#pragma once

// Output multiplexing: the bytes a rank writes to one of its streams become
// whole lines prefixed with the rank ("[2]<stdout>: ..."), each written with
// one write() so lines of different ranks never interleave. Single-threaded:
// tuttirun's event loop owns every OutputStream.

#include <string>

namespace tutti {
namespace launcher {

class OutputStream {
 public:
  // `prefix`: "[2]<stdout>: ". Lines go to `out_fd`; the raw bytes also to
  // `file_fd` when it is >= 0 (--output-filename; the stream owns it).
  OutputStream(std::string prefix, int out_fd, int file_fd = -1);
  ~OutputStream();
  OutputStream(const OutputStream&) = delete;
  OutputStream& operator=(const OutputStream&) = delete;

  // Takes bytes read from the rank; writes every complete line. A line longer
  // than kMaxLine is written in pieces of kMaxLine bytes.
  void append(const char* data, size_t size);
  // Writes a partial last line (with a newline added). Idempotent.
  void finish();

  static constexpr size_t kMaxLine = 1 << 20;

 private:
  void writeLine(const char* data, size_t size);

  std::string prefix_;
  int out_fd_;
  int file_fd_;
  std::string pending_;  // bytes after the last newline
};

// write() all of `size` bytes to `fd`, retrying on EINTR and waiting (poll)
// while a non-blocking fd is full. Returns false on another error (EPIPE:
// tuttirun's own output was closed; the job goes on).
bool writeAll(int fd, const char* data, size_t size);

}  // namespace launcher
}  // namespace tutti

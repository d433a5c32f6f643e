#include "coordinator/shutdown_handshake.h"

namespace tutti {

ShutdownHandshake::ShutdownHandshake(int size, double timeout_seconds)
    : size_(size),
      timeout_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(timeout_seconds))),
      acked_(static_cast<size_t>(size > 0 ? size : 0), false) {}

void ShutdownHandshake::start(Clock::time_point now) {
  if (state_ != State::kRunning) return;
  state_ = State::kStarted;
  deadline_ = now + timeout_;
}

bool ShutdownHandshake::takeAnnouncement() {
  if (state_ != State::kStarted) return false;
  state_ = State::kAnnounced;
  return true;
}

void ShutdownHandshake::close(Clock::time_point now) {
  start(now);
  state_ = State::kClosing;
}

void ShutdownHandshake::ack(int rank) {
  if (state_ != State::kClosing || rank <= 0 || rank >= size_) return;
  if (acked_[static_cast<size_t>(rank)]) return;
  acked_[static_cast<size_t>(rank)] = true;
  ++acked_count_;
}

}  // namespace tutti

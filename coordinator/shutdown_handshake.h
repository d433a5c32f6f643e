#pragma once

// The runtime's shutdown handshake (coordinator/controller.h, "Shutdown"), as
// seen by one rank's background thread: when this rank started shutting down,
// whether its shutdown request went out, whether the closing ResponseList
// went out (rank 0) or came in (a worker), which workers acked it, and the
// deadline that bounds the whole handshake.
//
//   kRunning --start()--> kStarted --takeAnnouncement()--> kAnnounced
//      |                     |                                 |
//      +------------------ close() ----------------------------+--> kClosing
//
// close() from kRunning starts the clock first. Every transition is one way;
// calls that do not apply to the current state change nothing.
//
// Threading: not thread-safe; owned by the background thread. (A shutdown()
// on another thread only sets RuntimeImpl's atomic request flag; the loop
// then calls start().)

#include <chrono>
#include <vector>

namespace tutti {

class ShutdownHandshake {
 public:
  using Clock = std::chrono::steady_clock;

  enum class State {
    kRunning,    // no shutdown yet
    kStarted,    // this rank shuts down; its shutdown request is not sent yet
    kAnnounced,  // this rank's shutdown request went out (rank 0: into its controller)
    kClosing,    // the shutdown ResponseList went out (rank 0) / came in (worker)
  };

  // size: ranks in the job (rank 0 waits for size - 1 acks); timeout_seconds
  // (>= 0): how long the handshake may take from start(), TUTTI_TIMEOUT_SECONDS.
  ShutdownHandshake(int size, double timeout_seconds);

  State state() const { return state_; }
  bool started() const { return state_ != State::kRunning; }
  bool closing() const { return state_ == State::kClosing; }
  // The end of the handshake: start() + timeout. Meaningful once started().
  Clock::time_point deadline() const { return deadline_; }
  // True once started and `now` has reached the deadline.
  bool expired(Clock::time_point now) const { return started() && now >= deadline_; }

  // kRunning -> kStarted, the deadline set to now + timeout; otherwise nothing.
  void start(Clock::time_point now);
  // kStarted -> kAnnounced; true exactly then: the caller sends this rank's
  // shutdown request now. False in every other state.
  bool takeAnnouncement();
  // Any state -> kClosing (from kRunning: start(now) first, so the deadline
  // counts from the first of start() and close()).
  void close(Clock::time_point now);

  // Rank 0 while closing: worker `rank` (1..size-1) acked the shutdown list.
  // A repeated ack, an ack before closing, or a rank out of range counts nothing.
  void ack(int rank);
  // True when every worker (size - 1 of them) acked.
  bool allAcked() const { return acked_count_ >= size_ - 1; }

 private:
  const int size_;
  const Clock::duration timeout_;
  State state_ = State::kRunning;
  Clock::time_point deadline_;
  std::vector<bool> acked_;  // by rank; rank 0 never acks
  int acked_count_ = 0;
};

}  // namespace tutti

#pragma once

// Waiting on work that advances only while it is polled (MPI's non-blocking
// requests: Open MPI has no progress thread, so a collective started with
// MPI_Iallreduce moves only inside MPI_Test), bounded by the time without
// progress, as the tcp transport's "no progress for N s".
//
// pollUntilIdle() calls `poll` in a loop, without sleeping (as Open MPI's own
// blocking calls spin in its progress engine; with mpi_yield_when_idle set,
// that engine yields the CPU on each call). Each call reports whether the
// work is done, failed, or made progress (some part of it completed); the
// wait ends with kIdle once `timeout` passed since the start or the last
// progress, whichever is later. The clock is read on every poll.
//
// Threading: runs on the calling thread; `poll` is called on it only.

#include <chrono>
#include <functional>

namespace tutti {

struct PollStep {
  bool done = false;        // everything completed: the wait ends with kDone
  bool failed = false;      // an error: the wait ends with kFailed at once
  bool progressed = false;  // some part completed: the idle clock restarts
};

enum class PollOutcome { kDone, kFailed, kIdle };

PollOutcome pollUntilIdle(const std::function<PollStep()>& poll,
                          std::chrono::steady_clock::duration timeout);

// `seconds` (TUTTI_TIMEOUT_SECONDS) as a steady_clock duration.
std::chrono::steady_clock::duration secondsToDuration(double seconds);

}  // namespace tutti

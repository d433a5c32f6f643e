#pragma once

// The stall inspector (rank 0): finds names some ranks submitted and others
// did not, for longer than TUTTI_STALL_CHECK_TIME_SECONDS, and logs once per
// check period, per name:
//   tensor 'x' (allreduce) stalled for 61 s: ranks [2, 3] have not submitted
//   it; ranks [0, 1] have
// With TUTTI_STALL_SHUTDOWN_TIME_SECONDS > 0, a name pending that long is
// failed on every rank (kStalled) through the controller.
//
// The background loop asks nextDeadline() so that pollControl() wakes up in
// time for the next check; nothing polls. A check time of 0 disables the
// warnings; a shutdown time of 0 disables failing.
//
// Threading: owned and used only by rank 0's background thread.

#include <chrono>

#include "coordinator/controller.h"

namespace tutti {

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  StallInspector(double check_seconds, double shutdown_seconds, Clock::time_point now);
  // When the loop must wake next for this inspector (time_point::max() when
  // it has nothing to do).
  Clock::time_point nextDeadline(const Controller& controller) const;
  // Warns about and fails stalled names if a deadline passed.
  void check(Controller& controller, Clock::time_point now);

 private:
  Clock::duration check_;     // zero: no warnings
  Clock::duration shutdown_;  // zero: no failing
  Clock::time_point next_check_;
};

}  // namespace tutti

#include "ops/poll_deadline.h"

namespace tutti {

PollOutcome pollUntilIdle(const std::function<PollStep()>& poll,
                          std::chrono::steady_clock::duration timeout) {
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  while (true) {
    const PollStep step = poll();
    if (step.failed) return PollOutcome::kFailed;
    if (step.done) return PollOutcome::kDone;
    const auto now = Clock::now();
    if (step.progressed) {
      last_progress = now;
    } else if (now - last_progress >= timeout) {
      return PollOutcome::kIdle;
    }
  }
}

std::chrono::steady_clock::duration secondsToDuration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds));
}

}  // namespace tutti

#include "coordinator/stall_inspector.h"

#include <algorithm>
#include <sstream>

#include "core/logging.h"

namespace tutti {

namespace {

StallInspector::Clock::duration toDuration(double seconds) {
  return std::chrono::duration_cast<StallInspector::Clock::duration>(
      std::chrono::duration<double>(std::max(seconds, 0.0)));
}

std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << "]";
  return out.str();
}

// "61" or, below ten seconds, "1.5".
std::string secondsSince(StallInspector::Clock::time_point since,
                         StallInspector::Clock::time_point now) {
  double s = std::chrono::duration<double>(now - since).count();
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(s < 10 ? 1 : 0);
  out << s;
  return out.str();
}

// The stall warning's last words: when the op fails, or that it never will.
std::string failsIn(StallInspector::Clock::duration shutdown,
                    StallInspector::Clock::duration waited) {
  if (shutdown.count() == 0) return "it never fails: TUTTI_STALL_SHUTDOWN_TIME_SECONDS=0";
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(0);
  out << "this op fails in " << std::chrono::duration<double>(shutdown - waited).count()
      << " s (TUTTI_STALL_SHUTDOWN_TIME_SECONDS=" << std::chrono::duration<double>(shutdown).count()
      << ")";
  return out.str();
}

// " in process set N" for a set other than the global one.
std::string inSet(int32_t process_set) {
  if (process_set == kGlobalProcessSet) return "";
  return " in process set " + std::to_string(process_set);
}

}  // namespace

StallInspector::StallInspector(double check_seconds, double shutdown_seconds, Clock::time_point now)
    : check_(toDuration(check_seconds)),
      shutdown_(toDuration(shutdown_seconds)),
      next_check_(now + check_) {}

StallInspector::Clock::time_point StallInspector::nextDeadline(const Controller& controller) const {
  Clock::time_point next = Clock::time_point::max();
  if (check_.count() == 0 && shutdown_.count() == 0) return next;
  std::vector<Controller::PendingTensor> pending = controller.pending();
  if (pending.empty()) return next;  // idle: no periodic wake-ups
  if (check_.count() > 0) next = std::max(next_check_, pending.front().since + check_);
  if (shutdown_.count() > 0) next = std::min(next, pending.front().since + shutdown_);
  return next;
}

void StallInspector::check(Controller& controller, Clock::time_point now) {
  const bool warn = check_.count() > 0 && now >= next_check_;
  if (!warn && shutdown_.count() == 0) return;
  for (const Controller::PendingTensor& p : controller.pending()) {
    const Clock::duration waited = now - p.since;
    if (shutdown_.count() > 0 && waited >= shutdown_) {
      std::ostringstream msg;
      msg << opTypeName(p.type) << " '" << p.name << "'" << inSet(p.process_set) << " stalled for "
          << secondsSince(p.since, now) << " s: ranks " << rankList(p.missing)
          << " never submitted it (TUTTI_STALL_SHUTDOWN_TIME_SECONDS="
          << std::chrono::duration<double>(shutdown_).count() << ")";
      TUTTI_LOG(kError) << msg.str();
      controller.fail(p.key, StatusCode::kStalled, msg.str());
    } else if (warn && waited >= check_) {
      TUTTI_LOG(kWarning) << "tensor '" << p.name << "' (" << opTypeName(p.type)
                          << inSet(p.process_set) << ") stalled for " << secondsSince(p.since, now)
                          << " s: ranks " << rankList(p.missing) << " have not submitted it; ranks "
                          << rankList(p.submitted) << " have; " << failsIn(shutdown_, waited);
    }
  }
  if (warn) next_check_ = now + check_;
}

}  // namespace tutti

#include "ops/mpi/mpi_wait.h"

#include <algorithm>
#include <sstream>

#include "core/mpi_exit_notices.h"
#include "ops/mpi/mpi_environment.h"
#include "ops/poll_deadline.h"

namespace tutti {

Status waitMpiRequests(std::vector<MPI_Request>* requests, const char* call,
                       const MpiWaitScope& scope) {
  if (requests->empty()) return Status::ok();
  std::vector<int> indices(requests->size());
  int code = MPI_SUCCESS;
  const PollOutcome outcome = pollUntilIdle(
      [&] {
        if (scope.on_poll) scope.on_poll();
        int completed = 0;
        code = MPI_Testsome(static_cast<int>(requests->size()), requests->data(), &completed,
                            indices.data(), MPI_STATUSES_IGNORE);
        PollStep step;
        step.failed = code != MPI_SUCCESS;
        // MPI_UNDEFINED: no active request is left.
        step.done = completed == MPI_UNDEFINED;
        step.progressed = completed > 0;
        if (completed > 0 && std::all_of(requests->begin(), requests->end(),
                                         [](MPI_Request r) { return r == MPI_REQUEST_NULL; })) {
          step.done = true;
        }
        return step;
      },
      secondsToDuration(scope.timeout_seconds));
  if (outcome == PollOutcome::kDone) return Status::ok();
  if (outcome == PollOutcome::kFailed) return mpiStatus(code, call, scope.rank);
  const double grace = mpiAbortGraceSeconds(scope.timeout_seconds);
  std::ostringstream msg;
  msg << "rank " << scope.rank << ": " << call << " on " << scope.where << " made no progress for "
      << scope.timeout_seconds << " s (TUTTI_TIMEOUT_SECONDS): a rank of it hangs or is stopped; "
      << mpiAbortNotice(grace);
  wedgeMpi(msg.str(), grace);
  return Status::peerLost(msg.str());
}

std::string mpiScopeName(const std::vector<int>& ranks, bool global) {
  std::ostringstream out;
  if (global) {
    out << "the global process set (ranks 0-" << (ranks.empty() ? 0 : ranks.back()) << ")";
    return out.str();
  }
  out << "the process set of global ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  return out.str();
}

double mpiAbortGraceSeconds(double timeout_seconds) {
  return 2 * std::min(1.0, timeout_seconds);
}

}  // namespace tutti

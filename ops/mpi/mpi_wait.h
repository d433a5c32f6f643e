#pragma once

// Bounded waits for MPI requests: the mpi backend runs every collective as
// its non-blocking form (MPI_Iallreduce, MPI_Ibcast, ...) and the transport
// its messages as MPI_Isend/MPI_Irecv, and waits for them here instead of in
// a blocking MPI call, which has no timeout.
//
// waitMpiRequests() polls with MPI_Testsome (ops/poll_deadline.h: no sleep,
// as Open MPI's blocking calls) until every request completed. Progress is a
// request completing: a collective is one request, so its bound counts from
// the call (each call moves at most max_chunk_bytes, 1 GiB by default);
// point-to-point waits restart the clock whenever one message completes.
//
// Errors: an MPI error is kPeerLost naming the call (mpiStatus). After
// `timeout_seconds` without progress: kPeerLost "rank R: MPI_Iallreduce on
// the global process set (ranks 0-3) made no progress for 5 s
// (TUTTI_TIMEOUT_SECONDS) ...", and MPI is wedged (wedgeMpi in
// ops/mpi/mpi_environment.h): the requests stay posted (MPI cannot cancel a
// collective) and the job ends with MPI_Abort shortly after, from a thread of
// its own, once the error had time to reach the program on this rank and the
// other ranks had time to reach their own deadlines.
//
// Threading: the calling thread only (the runtime's background thread).

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {

// What a timed-out wait names.
struct MpiWaitScope {
  int rank = 0;                 // this process's rank in the job
  std::string where;            // e.g. "the global process set (ranks 0-3)"
  double timeout_seconds = 30;  // TUTTI_TIMEOUT_SECONDS
  // Called on every poll of a wait (the transport's heartbeats,
  // ops/peer_liveness.h); may be empty.
  std::function<void()> on_poll;
};

// Waits for every request of `requests` (completed ones become
// MPI_REQUEST_NULL). On a timeout the unfinished ones are left as they are.
Status waitMpiRequests(std::vector<MPI_Request>* requests, const char* call,
                       const MpiWaitScope& scope);

// "the global process set (ranks 0-3)" for a world of `size` ranks;
// "the process set of global ranks 0,2" for a set.
std::string mpiScopeName(const std::vector<int>& ranks, bool global);

// Seconds from a timeout to MPI_Abort: twice the runtime's abort grace
// (min(1 s, timeout)), so that the error reaches the program first.
double mpiAbortGraceSeconds(double timeout_seconds);

}  // namespace tutti

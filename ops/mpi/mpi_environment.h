#pragma once

// The process's MPI library: initialised once, shared by every MPI-backed
// runtime this process creates, finalised at process exit.
//
// MPI cannot be initialised again after MPI_Finalize, so tutti never finalises
// between runtimes: init -> shutdown -> init in one process reuses the same
// MPI (the world, and hence the world size, is fixed by mpirun).
//  - If the program initialised MPI itself (MPI_Initialized), tutti uses it
//    and never finalises it; it needs MPI_THREAD_SERIALIZED at least, because
//    tutti calls MPI from its background thread (MPI_THREAD_MULTIPLE if the
//    program also calls MPI while tutti runs).
//  - Otherwise the first acquireMpi() calls MPI_Init_thread(MPI_THREAD_MULTIPLE)
//    and registers an exit handler (on_exit) that finalises MPI, unless a
//    runtime is still alive then (its background thread may be inside MPI):
//    that is logged and MPI is left unfinalised (mpirun then reports the rank
//    as having exited without finalising).
//
// Finalising, bounded: Open MPI's MPI_Finalize waits for every rank (a fence
// through mpirun), and hangs for good when mpirun's runtime is stuck (seen
// after garbage and an idle connection on mpirun's PMIx port: its server
// thread blocks reading the idle connection). The exit handler therefore
// first waits for every rank to reach its own exit (MPI_Ibarrier on
// MPI_COMM_WORLD, polled; no bound: a rank may legitimately work on longer),
// then calls MPI_Finalize with a bound of TUTTI_TIMEOUT_SECONDS: if it has
// not returned by then, the rank prints finalizeGiveUpNotice
// (core/mpi_exit_notices.h) as a warning and leaves with _exit and the exit
// status the program was leaving with (its work is done; mpirun may then
// report the rank as not finalised, and tuttirun --mpi stops a mpirun that
// is still running once every rank left this way).
//
// Wedged: after a wait that timed out (ops/mpi/mpi_wait.h) a request that
// never completes stays posted, and no later MPI call of the process is
// safe. wedgeMpi() logs why and arranges MPI_Abort(MPI_COMM_WORLD, 1) after a
// grace period from a thread of its own (nothing else can release the other
// ranks' MPI state); transports then skip their closing handshake, and a
// process that exits before the abort calls MPI_Abort from its exit handler
// (with its exit status, or 1 for 0) instead of finalising. MPI_Abort waits
// for mpirun's daemon, which may be out of reach (a cut link): if it has not
// ended the process within the same grace, the process leaves with _exit.
//
// Threading: every function is thread-safe.
//
// Errors: MPI calls on tutti's communicators return their error codes
// (MPI_ERRORS_RETURN); mpiStatus() turns one into a Status naming the call.
// Open MPI usually aborts the whole job itself when a process dies, before
// tutti sees an error (see ops/mpi/mpi_backend.h).

#include <mpi.h>

#include <functional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace tutti {

// Initialises MPI if needed (see above) and counts one live user (a
// transport). `timeout_seconds` (TUTTI_TIMEOUT_SECONDS) bounds MPI_Finalize
// at exit (the last value given wins). Must be balanced by releaseMpi().
Status acquireMpi(double timeout_seconds);
void releaseMpi();
// 1 when MPI runs with MPI_THREAD_MULTIPLE, 0 with a lower thread level, -1
// before the first successful acquireMpi() of this process.
int mpiThreadsMultipleLevel();

// Marks MPI wedged (see above): logs `why` as an error, tells the other
// ranks through the listener (below) and, the first time, starts the thread
// that calls MPI_Abort(MPI_COMM_WORLD, 1) after `grace_seconds`. Called on
// the thread whose wait timed out.
void wedgeMpi(const std::string& why, double grace_seconds);
bool mpiWedged();
// The live MpiTransport's announcement of a wedge to the other ranks (so
// that ranks waiting elsewhere, e.g. in the negotiation, fail too); called by
// wedgeMpi on its thread. Empty: none.
void setMpiWedgeListener(std::function<void(const std::string& why)> listener);

// The user-defined reduction for float16 or bfloat16 (`dtype`) under `op`
// (kAverage reduces as kSum). Created once, after acquireMpi(); never freed
// before MPI_Finalize. The buffers are reduced as MPI_UINT16_T.
MPI_Op halfPrecisionOp(DataType dtype, ReduceOp op);

// "MPI_Allreduce failed: <MPI's error string> (MPI error class N)".
std::string mpiErrorText(const char* call, int code);
// ok for MPI_SUCCESS; otherwise kPeerLost (the job cannot go on) naming the
// call and the rank.
Status mpiStatus(int code, const char* call, int rank);

}  // namespace tutti

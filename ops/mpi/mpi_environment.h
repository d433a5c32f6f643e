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
//    and registers an atexit handler that calls MPI_Finalize, unless a runtime
//    is still alive then (its background thread may be inside MPI): that is
//    logged and MPI is left unfinalised (mpirun then reports the rank as
//    having exited without finalising).
//
// Threading: every function is thread-safe.
//
// Errors: MPI calls on tutti's communicators return their error codes
// (MPI_ERRORS_RETURN); mpiStatus() turns one into a Status naming the call.
// Open MPI usually aborts the whole job itself when a process dies, before
// tutti sees an error (see ops/mpi/mpi_backend.h).

#include <mpi.h>

#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace tutti {

// Initialises MPI if needed (see above) and counts one live user (a
// transport). Must be balanced by releaseMpi().
Status acquireMpi();
void releaseMpi();
// 1 when MPI runs with MPI_THREAD_MULTIPLE, 0 with a lower thread level, -1
// before the first successful acquireMpi() of this process.
int mpiThreadsMultipleLevel();

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

#include "ops/mpi/mpi_environment.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "core/logging.h"
#include "core/mpi_exit_notices.h"
#include "ops/poll_deadline.h"
#include "ops/reduce.h"

namespace tutti {
namespace {

// Process-wide by nature: MPI itself is. Guarded by mu.
struct MpiProcess {
  std::mutex mu;
  bool initialized = false;  // by anyone (us or the program)
  bool ours = false;         // we called MPI_Init_thread, so we finalise
  int thread_level = MPI_THREAD_SINGLE;
  int users = 0;                // live transports
  double timeout_seconds = 30;  // bounds MPI_Finalize at exit
  std::function<void(const std::string&)> wedge_listener;
  double abort_grace_seconds = 2;  // wedgeMpi's grace, also MPI_Abort's bound
  bool ops_made = false;
  MPI_Op ops[2][kNumReduceOps] = {};  // [0] float16, [1] bfloat16
};

MpiProcess& process() {
  static MpiProcess* p = new MpiProcess();  // never destroyed: used from atexit
  return *p;
}

// MPI's user functions: inout[i] = in[i] op inout[i], in float32.
template <DataType kType, ReduceOp kOp>
void halfReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduceInto(inout, in, static_cast<size_t>(*len), kType, kOp);
}

template <DataType kType>
void makeOps(MPI_Op* ops) {
  MPI_Op_create(&halfReduce<kType, ReduceOp::kSum>, 1, &ops[static_cast<int>(ReduceOp::kSum)]);
  MPI_Op_create(&halfReduce<kType, ReduceOp::kSum>, 1, &ops[static_cast<int>(ReduceOp::kAverage)]);
  MPI_Op_create(&halfReduce<kType, ReduceOp::kMin>, 1, &ops[static_cast<int>(ReduceOp::kMin)]);
  MPI_Op_create(&halfReduce<kType, ReduceOp::kMax>, 1, &ops[static_cast<int>(ReduceOp::kMax)]);
  MPI_Op_create(&halfReduce<kType, ReduceOp::kProduct>, 1,
                &ops[static_cast<int>(ReduceOp::kProduct)]);
}

std::atomic<bool> g_wedged{false};

// MPI_Abort(MPI_COMM_WORLD, code), and _exit(code) if that has not ended the
// process within `bound_seconds` (MPI_Abort waits for mpirun's daemon, which
// may be out of reach: a cut link).
[[noreturn]] void abortJob(int code, double bound_seconds) {
  std::thread([code, bound_seconds] {
    std::this_thread::sleep_for(secondsToDuration(bound_seconds));
    TUTTI_LOG(kError) << "MPI_Abort did not end this process within " << bound_seconds
                      << " s (mpirun out of reach?): leaving with exit code " << code;
    ::_exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  ::_exit(code);
}

// Waits until every rank of MPI_COMM_WORLD reached its exit handler: an
// MPI_Ibarrier polled with a growing sleep (100 us to 10 ms), without bound.
void waitForEveryRank() {
  MPI_Request barrier = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &barrier) != MPI_SUCCESS) return;
  auto sleep = std::chrono::microseconds(100);
  int done = 0;
  while (MPI_Test(&barrier, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(10000));
  }
}

// MPI_Finalize, or _exit(exit_status) with a warning when it has not returned
// within timeout_seconds.
void finalizeWithin(double timeout_seconds, int exit_status) {
  struct Watch {
    std::mutex mu;
    std::condition_variable cv;
    bool returned = false;
  };
  auto watch = std::make_shared<Watch>();
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::thread([watch, rank, timeout_seconds, exit_status] {
    std::unique_lock<std::mutex> lock(watch->mu);
    if (watch->cv.wait_for(lock, secondsToDuration(timeout_seconds),
                           [&] { return watch->returned; })) {
      return;
    }
    TUTTI_LOG(kWarning) << finalizeGiveUpNotice(rank, exit_status, timeout_seconds);
    ::_exit(exit_status);
  }).detach();
  MPI_Finalize();
  {
    std::lock_guard<std::mutex> lock(watch->mu);
    watch->returned = true;
  }
  watch->cv.notify_all();
}

// on_exit handler: `exit_status` is what the program passed to exit().
void finalizeAtExit(int exit_status, void*) {
  MpiProcess& p = process();
  std::unique_lock<std::mutex> lock(p.mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!p.ours || finalized) return;
  if (g_wedged) {
    TUTTI_LOG(kError) << "process exit after an MPI call that never completed: ending the job "
                         "with MPI_Abort now";
    abortJob(exit_status != 0 ? exit_status : 1, p.abort_grace_seconds);
  }
  if (p.users > 0) {
    TUTTI_LOG(kWarning) << "process exit with a tutti runtime still running on the mpi backend: "
                           "MPI is not finalised (call shutdown() before exiting)";
    return;
  }
  const double timeout = p.timeout_seconds;
  lock.unlock();
  waitForEveryRank();
  finalizeWithin(timeout, exit_status);
}

const char* threadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

// tutti runs MPI's collectives non-blocking (MPI_Iallreduce polled against
// TUTTI_TIMEOUT_SECONDS). Open MPI 4.1's libnbc picks its iallreduce algorithm
// by itself ("ignore") and takes the binomial tree for every in-place call,
// which is what tutti makes: 2.5-3x the blocking MPI_Allreduce's time at
// 1-4 MiB here, and the ResNet-50 gradient set 2.2x slower. Its ring (1)
// brings both back to the blocking call's time (docs/reliability.md).
// Set before MPI_Init_thread, only where the user has not chosen (an
// OMPI_MCA_* variable or --mca of mpirun, which exports the same variable).
void chooseNonblockingAlgorithms() {
  ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
}

}  // namespace

Status acquireMpi(double timeout_seconds) {
  MpiProcess& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
  p.timeout_seconds = timeout_seconds;
  if (!p.initialized) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) {
      return Status::invalidArgument(
          "TUTTI_BACKEND=mpi: MPI was already finalised in this process (MPI cannot be "
          "initialised again; finalise MPI only after tutti's last shutdown())");
    }
    if (initialized) {
      MPI_Query_thread(&p.thread_level);
    } else {
      chooseNonblockingAlgorithms();
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &p.thread_level);
      if (rc != MPI_SUCCESS) return Status::ioError(mpiErrorText("MPI_Init_thread", rc));
      p.ours = true;
      ::on_exit(finalizeAtExit, nullptr);
    }
    p.initialized = true;
  }
  if (p.thread_level < MPI_THREAD_SERIALIZED) {
    return Status::invalidArgument(
        std::string("TUTTI_BACKEND=mpi: the program initialised MPI with ") +
        threadLevelName(p.thread_level) +
        ", but tutti calls MPI from its background thread and needs MPI_THREAD_SERIALIZED or "
        "MPI_THREAD_MULTIPLE (initialise with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...))");
  }
  if (p.thread_level < MPI_THREAD_MULTIPLE && !p.ours && p.users == 0) {
    TUTTI_LOG(kWarning) << "MPI was initialised with MPI_THREAD_SERIALIZED: the program must not "
                           "call MPI while tutti runs (tutti's background thread calls it)";
  }
  if (!p.ops_made) {
    makeOps<DataType::kFloat16>(p.ops[0]);
    makeOps<DataType::kBFloat16>(p.ops[1]);
    p.ops_made = true;
  }
  ++p.users;
  return Status::ok();
}

void releaseMpi() {
  MpiProcess& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
  --p.users;
}

int mpiThreadsMultipleLevel() {
  MpiProcess& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.initialized) return -1;
  return p.thread_level >= MPI_THREAD_MULTIPLE ? 1 : 0;
}

void wedgeMpi(const std::string& why, double grace_seconds) {
  TUTTI_LOG(kError) << why;
  std::function<void(const std::string&)> listener;
  {
    MpiProcess& p = process();
    std::lock_guard<std::mutex> lock(p.mu);
    listener = p.wedge_listener;
  }
  if (listener) listener(why);
  {
    MpiProcess& p = process();
    std::lock_guard<std::mutex> lock(p.mu);
    p.abort_grace_seconds = grace_seconds;
  }
  if (g_wedged.exchange(true)) return;
  std::thread([grace_seconds] {
    std::this_thread::sleep_for(secondsToDuration(grace_seconds));
    abortJob(1, grace_seconds);
  }).detach();
}

bool mpiWedged() {
  return g_wedged;
}

void setMpiWedgeListener(std::function<void(const std::string& why)> listener) {
  MpiProcess& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
  p.wedge_listener = std::move(listener);
}

MPI_Op halfPrecisionOp(DataType dtype, ReduceOp op) {
  MpiProcess& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.ops[dtype == DataType::kBFloat16 ? 1 : 0][static_cast<int>(op)];
}

std::string mpiErrorText(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  int error_class = code;
  MPI_Error_class(code, &error_class);
  return std::string(call) + " failed: " + std::string(text, static_cast<size_t>(len)) +
         " (MPI error class " + std::to_string(error_class) + ")";
}

Status mpiStatus(int code, const char* call, int rank) {
  if (code == MPI_SUCCESS) return Status::ok();
  return Status::peerLost("rank " + std::to_string(rank) + ": " + mpiErrorText(call, code) +
                          "; the MPI communicator cannot be used any more");
}

}  // namespace tutti

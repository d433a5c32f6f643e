#include "ops/mpi/mpi_environment.h"

#include <cstdlib>
#include <mutex>

#include "core/logging.h"
#include "ops/reduce.h"

namespace tutti {
namespace {

// Process-wide by nature: MPI itself is. Guarded by mu.
struct MpiProcess {
  std::mutex mu;
  bool initialized = false;  // by anyone (us or the program)
  bool ours = false;         // we called MPI_Init_thread, so we finalise
  int thread_level = MPI_THREAD_SINGLE;
  int users = 0;  // live transports
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

void finalizeAtExit() {
  MpiProcess& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!p.ours || finalized) return;
  if (p.users > 0) {
    TUTTI_LOG(kWarning) << "process exit with a tutti runtime still running on the mpi backend: "
                           "MPI is not finalised (call shutdown() before exiting)";
    return;
  }
  MPI_Finalize();
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

}  // namespace

Status acquireMpi() {
  MpiProcess& p = process();
  std::lock_guard<std::mutex> lock(p.mu);
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
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &p.thread_level);
      if (rc != MPI_SUCCESS) return Status::ioError(mpiErrorText("MPI_Init_thread", rc));
      p.ours = true;
      std::atexit(finalizeAtExit);
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

// One rank of tests/mpi/stop_rank_test.py, run under `tuttirun --mpi`: every
// rank allreduces 16 MiB in a loop on an MpiBackend (no runtime, so no
// negotiation between the collectives: a rank that stops always leaves the
// others inside MPI_Iallreduce). The rank given as argv[1] stops itself
// (SIGSTOP from a thread of its own) once the loop runs; the others must fail
// after TUTTI_TIMEOUT_SECONDS naming the call, and the job must end with
// MPI_Abort even though they do not exit (they sleep after the error).
//
// Mode "between" (argv[2]): a Runtime on the mpi backend instead, so that
// the negotiation runs between the collectives. After one allreduce the stop
// rank stops itself at once and the others enqueue a second allreduce, which
// waits in the negotiation for the stopped rank's request (no MPI call is
// pending there): they must fail after TUTTI_TIMEOUT_SECONDS by the
// heartbeats (ops/peer_liveness.h), naming the stopped rank.
//
// Output lines (flushed):
//   running rank R                      after the first allreduce
//   stopping rank R at T                (T: seconds since the epoch)
//   error rank R after S s at T: MESSAGE  the failed call took S s
//   still alive rank R                  the job was not aborted in time

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/runtime.h"
#include "ops/mpi/mpi_backend.h"
#include "ops/mpi/mpi_transport.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The loop both modes share: `step(i)` runs collective i. After the first,
// rank `stop_rank` stops itself: at once (`stop_at_once`, between two
// collectives) or 0.3 s later from a thread of its own (inside one). After an
// error the program keeps it to itself: the job must still end (MPI_Abort
// from tutti's own thread). Returns the exit status.
int stepUntilError(int rank, int stop_rank, bool stop_at_once,
                   const std::function<tutti::Status(int)>& step) {
  for (int i = 0;; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const tutti::Status st = step(i);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!st.isOk()) {
      std::printf("error rank %d after %.3f s at %.3f: %s\n", rank, took, now(),
                  st.toString().c_str());
      std::fflush(stdout);
      break;
    }
    if (i != 0) continue;
    std::printf("running rank %d\n", rank);
    std::fflush(stdout);
    if (rank != stop_rank) continue;
    auto stop = [rank] {
      std::printf("stopping rank %d at %.3f\n", rank, now());
      std::fflush(stdout);
      ::raise(SIGSTOP);
    };
    if (stop_at_once) {
      stop();
    } else {
      std::thread([stop] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        stop();
      }).detach();
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::printf("still alive rank %d\n", rank);
  return 1;
}

int setupFailed(const tutti::Status& st) {
  std::printf("setup failed: %s\n", st.toString().c_str());
  return 2;
}

// The "between" mode (see the header).
int runBetween(int stop_rank) {
  using namespace tutti;
  Settings settings;
  Status st = loadSettings(processEnv(), &settings);
  std::unique_ptr<Runtime> rt;
  if (st.isOk()) st = Runtime::create(settings, &rt);
  if (!st.isOk()) return setupFailed(st);
  std::vector<float> in(1024, 1.0f), out(1024);
  const TensorView in_view{in.data(), DataType::kFloat32, {1024}};
  const TensorView out_view{out.data(), DataType::kFloat32, {1024}};
  return stepUntilError(rt->rank(), stop_rank, true, [&](int i) {
    OpOptions opts;
    opts.name = "between." + std::to_string(i);
    Handle h = -1;
    Status s = rt->allreduce(in_view, out_view, opts, &h);
    return s.isOk() ? rt->wait(h) : s;
  });
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tutti;
  const int stop_rank = argc > 1 ? std::atoi(argv[1]) : 1;
  if (argc > 2 && std::string(argv[2]) == "between") return runBetween(stop_rank);
  Settings settings;
  Status st = loadSettings(processEnv(), &settings);
  std::unique_ptr<MpiTransport> transport;
  if (st.isOk()) st = MpiTransport::connect(settings, &transport);
  if (!st.isOk()) return setupFailed(st);
  MpiBackend backend(*transport);
  std::vector<float> buf(size_t{1} << 22, 1.0f);
  return stepUntilError(backend.rank(), stop_rank, false, [&](int) {
    return backend.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  });
}

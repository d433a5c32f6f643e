// One rank of tests/mpi/stop_rank_test.py, run under `tuttirun --mpi`: every
// rank allreduces 16 MiB in a loop on an MpiBackend (no runtime, so no
// negotiation between the collectives: a rank that stops always leaves the
// others inside MPI_Iallreduce). The rank given as argv[1] stops itself
// (SIGSTOP from a thread of its own) once the loop runs; the others must fail
// after TUTTI_TIMEOUT_SECONDS naming the call, and the job must end with
// MPI_Abort even though they do not exit (they sleep after the error).
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
#include <thread>
#include <vector>

#include "ops/mpi/mpi_backend.h"
#include "ops/mpi/mpi_transport.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tutti;
  const int stop_rank = argc > 1 ? std::atoi(argv[1]) : 1;
  Settings settings;
  Status st = loadSettings(processEnv(), &settings);
  std::unique_ptr<MpiTransport> transport;
  if (st.isOk()) st = MpiTransport::connect(settings, &transport);
  if (!st.isOk()) {
    std::printf("setup failed: %s\n", st.toString().c_str());
    return 2;
  }
  MpiBackend backend(*transport);
  const int rank = backend.rank();
  std::vector<float> buf(size_t{1} << 22, 1.0f);
  for (int step = 0;; ++step) {
    const auto start = std::chrono::steady_clock::now();
    st = backend.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!st.isOk()) {
      std::printf("error rank %d after %.3f s at %.3f: %s\n", rank, took, now(),
                  st.toString().c_str());
      std::fflush(stdout);
      break;
    }
    if (step == 0) {
      std::printf("running rank %d\n", rank);
      std::fflush(stdout);
      if (rank == stop_rank) {
        std::thread([rank] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          std::printf("stopping rank %d at %.3f\n", rank, now());
          std::fflush(stdout);
          ::raise(SIGSTOP);
        }).detach();
      }
    }
  }
  // A program that keeps the error to itself: the job must still end
  // (MPI_Abort from tutti's own thread).
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::printf("still alive rank %d\n", rank);
  return 1;
}

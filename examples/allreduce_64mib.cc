// allreduce_64mib: allreduces 64 MiB of float32 across the ranks of a job and
// checks the result exactly. Rank r contributes r + 1 everywhere, so every
// element must equal size (size + 1) / 2 (exact in float32 up to 2^24).
//
// Start it with tuttirun, or by hand with the TUTTI_* variables, e.g. 4 ranks:
//   export TUTTI_SIZE=4 TUTTI_SECRET=s TUTTI_RENDEZVOUS_PORT=29555
//   for r in 0 1 2 3; do TUTTI_RANK=$r ./allreduce_64mib & done; wait
//
// Prints per iteration the time of the slowest rank, algbw and busbw (GB/s,
// nccl-tests' definition: busbw = algbw * 2 (n - 1) / n) and #wrong; exits 1
// when any element is wrong. Uses only the C API (tutti.h).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tutti.h"

namespace {

constexpr int64_t kBytes = 64 << 20;
constexpr int64_t kCount = kBytes / sizeof(float);

bool ok(int rc, const char* what) {
  if (rc == TUTTI_OK) return true;
  std::fprintf(stderr, "%s failed: %s: %s\n", what, tutti_status_name(rc), tutti_last_error());
  return false;
}

// Allreduce of one double among ranks (for the slowest rank's time).
double maxOverRanks(double value) {
  int64_t shape[1] = {1};
  tutti_tensor t = {&value, TUTTI_FLOAT64, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_handle h = 0;
  if (!ok(tutti_allreduce_async(&t, &t, "allreduce_64mib.time", TUTTI_MAX, 1, 1, &h), "time") ||
      !ok(tutti_wait(h, -1), "wait")) {
    std::exit(1);
  }
  tutti_release(h);
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  if (!ok(tutti_init(), "tutti_init")) return 1;
  const int rank = tutti_rank();
  const int size = tutti_size();
  std::vector<float> data(kCount);
  int64_t shape[1] = {kCount};
  tutti_tensor tensor = {data.data(), TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  const float expected = static_cast<float>(size) * (size + 1) / 2;
  int64_t total_wrong = 0;
  if (rank == 0) {
    std::printf("allreduce_64mib: %d ranks, %lld bytes float32 sum\n", size,
                static_cast<long long>(kBytes));
    std::printf("%5s %12s %12s %12s %8s\n", "iter", "time(ms)", "algbw(GB/s)", "busbw(GB/s)",
                "#wrong");
  }
  for (int it = 0; it < iterations; ++it) {
    std::fill(data.begin(), data.end(), static_cast<float>(rank + 1));
    tutti_handle h = 0;
    const auto start = std::chrono::steady_clock::now();
    if (!ok(tutti_allreduce_async(&tensor, &tensor, "allreduce_64mib", TUTTI_SUM, 1, 1, &h),
            "tutti_allreduce_async") ||
        !ok(tutti_wait(h, -1), "tutti_wait")) {
      tutti_shutdown();
      return 1;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tutti_release(h);
    const int64_t wrong =
        std::count_if(data.begin(), data.end(), [&](float v) { return v != expected; });
    double wrong_all = maxOverRanks(static_cast<double>(wrong));
    total_wrong += static_cast<int64_t>(wrong_all);
    const double slowest = maxOverRanks(seconds);
    const double algbw = kBytes / slowest / 1e9;
    const double busbw = algbw * 2.0 * (size - 1) / size;
    if (rank == 0) {
      std::printf("%5d %12.2f %12.3f %12.3f %8lld\n", it, slowest * 1e3, algbw, busbw,
                  static_cast<long long>(wrong_all));
    }
  }
  if (!ok(tutti_shutdown(), "tutti_shutdown")) return 1;
  if (total_wrong != 0) {
    std::fprintf(stderr, "rank %d: WRONG: elements differ from %g\n", rank, expected);
    return 1;
  }
  if (rank == 0) std::printf("OK: every element is %g on every rank\n", expected);
  return 0;
}

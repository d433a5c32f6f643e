// The parts of a test rank's Settings that every harness (threads, forked
// processes, MPI processes) sets the same way.

#include <cstdlib>
#include <random>

#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {

void applyClusterOptions(const ClusterOptions& options, Settings* settings) {
  settings->timeout_seconds = options.timeout_seconds;
  if (!options.backend.empty()) settings->backend = options.backend;
  settings->segment_bytes = options.segment_bytes;
  if (options.fusion_threshold_bytes >= 0) {
    settings->fusion_threshold_bytes = options.fusion_threshold_bytes;
  }
  if (options.cycle_time_ms >= 0) settings->cycle_time_ms = options.cycle_time_ms;
  // Passed through so the suite can run with algorithms forced
  // (tests/CMakeLists.txt: tutti_cases_forced_*).
  if (const char* algorithms = std::getenv("TUTTI_ALGORITHMS")) settings->algorithms = algorithms;
  if (options.stall_check_time_seconds >= 0) {
    settings->stall_check_time_seconds = options.stall_check_time_seconds;
  }
  if (options.stall_shutdown_time_seconds >= 0) {
    settings->stall_shutdown_time_seconds = options.stall_shutdown_time_seconds;
  }
  if (options.adjust) options.adjust(settings);
}

std::string randomSecret() {
  std::random_device device;
  std::string secret;
  for (int i = 0; i < 32; ++i) secret += "0123456789abcdef"[device() % 16];
  return secret;
}

}  // namespace test
}  // namespace tutti

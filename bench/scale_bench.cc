// tutti-scale (run as bench/scale): the negotiation's control plane at N
// ranks (issue 38). For each N, bench/scale_job.h runs N ranks of the real
// Runtime as threads of this process over bench/scale_world.h (in-process
// control channel with heartbeats, a null data backend that only checks
// sizes) through ResNet-50 gradient-set steps.
//
// Two jobs per N: response cache on (the default capacity; the first step
// fills it and is not reported) and off (TUTTI_CACHE_CAPACITY=0). Each cell
// is "cached / uncached", the median over the reported steps. A cycle is one
// ResponseList from rank 0 (counted as the lists a worker received).
//
//   rank 0 msgs, bytes / cycle   control messages rank 0 sent + received
//   worker msgs, bytes / cycle   the same at the last rank
//   rank 0 msgs / step           the same per gradient-set step (cycles vary
//                                with scheduling; a step's count does less)
//   rank 0 CPU us / cycle        CPU time of rank 0's background thread
//                                (CLOCK_THREAD_CPUTIME_ID): negotiation,
//                                (de)serialization, fusion planning, and
//                                executing the lists with the null backend
//   rank 0 CPU ms / step         the same per step
//   cycles / step                ResponseLists per gradient-set step
//   enqueue -> all, ms (wall)    from the last rank's last enqueue to every
//                                rank holding (completed) every response
//
// Only the last column is a wall time; on a machine with fewer cores than
// ranks it measures the scheduler as much as tutti.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/scale_job.h"

namespace tutti::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The reported figures of one job, medians over its steps.
struct ModeFigures {
  double rank0_msgs = 0, rank0_bytes = 0, worker_msgs = 0, worker_bytes = 0;
  double cpu_us = 0, cycles = 0, latency_ms = 0;
  double rank0_msgs_step = 0, cpu_ms_step = 0;
  uint64_t heartbeats = 0;
};

ModeFigures summarize(const std::vector<StepFigures>& steps) {
  std::vector<double> r0m, r0b, wm, wb, cpu, cyc, lat, r0m_step, cpu_step;
  ModeFigures f;
  for (const StepFigures& s : steps) {
    const double c = std::max<double>(1, static_cast<double>(s.cycles));
    r0m.push_back(static_cast<double>(s.rank0.sent_messages + s.rank0.received_messages) / c);
    r0b.push_back(static_cast<double>(s.rank0.sent_bytes + s.rank0.received_bytes) / c);
    wm.push_back(static_cast<double>(s.worker.sent_messages + s.worker.received_messages) / c);
    wb.push_back(static_cast<double>(s.worker.sent_bytes + s.worker.received_bytes) / c);
    cpu.push_back(static_cast<double>(s.rank0.cpu_ns) / 1e3 / c);
    cyc.push_back(static_cast<double>(s.cycles));
    lat.push_back(s.latency_s * 1e3);
    r0m_step.push_back(static_cast<double>(s.rank0.sent_messages + s.rank0.received_messages));
    cpu_step.push_back(static_cast<double>(s.rank0.cpu_ns) / 1e6);
    f.heartbeats += s.rank0.heartbeats;
  }
  f.rank0_msgs = median(r0m);
  f.rank0_bytes = median(r0b);
  f.worker_msgs = median(wm);
  f.worker_bytes = median(wb);
  f.cpu_us = median(cpu);
  f.cycles = median(cyc);
  f.latency_ms = median(lat);
  f.rank0_msgs_step = median(r0m_step);
  f.cpu_ms_step = median(cpu_step);
  return f;
}

Status runMode(int size, bool cache, const ScaleOptions& options, ModeFigures* out) {
  ScaleJob job(size, cache, options);
  TUTTI_RETURN_IF_ERROR(job.start());
  std::mt19937 rng(options.seed + static_cast<unsigned>(size));
  StepFigures warmup;
  TUTTI_RETURN_IF_ERROR(job.step(&rng, &warmup));  // fills the cache
  std::vector<StepFigures> steps(static_cast<size_t>(options.steps));
  for (StepFigures& s : steps) TUTTI_RETURN_IF_ERROR(job.step(&rng, &s));
  *out = summarize(steps);
  return job.shutdown();
}

std::string pair(double cached, double uncached, int precision) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.*f / %.*f", precision, cached, precision, uncached);
  return buf;
}

void printHeader() {
  std::printf(
      "| N | rank 0 msgs / cycle | rank 0 bytes / cycle | rank 0 msgs / step | "
      "worker msgs / cycle | worker bytes / cycle | rank 0 CPU us / cycle | "
      "rank 0 CPU ms / step | cycles / step | enqueue -> all, ms (wall) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
}

void printRow(int size, const ModeFigures& c, const ModeFigures& u) {
  std::printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", size,
              pair(c.rank0_msgs, u.rank0_msgs, 0).c_str(),
              pair(c.rank0_bytes, u.rank0_bytes, 0).c_str(),
              pair(c.rank0_msgs_step, u.rank0_msgs_step, 0).c_str(),
              pair(c.worker_msgs, u.worker_msgs, 1).c_str(),
              pair(c.worker_bytes, u.worker_bytes, 0).c_str(), pair(c.cpu_us, u.cpu_us, 0).c_str(),
              pair(c.cpu_ms_step, u.cpu_ms_step, 1).c_str(), pair(c.cycles, u.cycles, 0).c_str(),
              pair(c.latency_ms, u.latency_ms, 1).c_str());
  std::fflush(stdout);
}

}  // namespace
}  // namespace tutti::bench

int main(int argc, char** argv) {
  using namespace tutti::bench;
  ScaleOptions options;
  CLI::App app{"tutti-scale: the negotiation's control plane at N thread ranks (bench/scale)"};
  app.add_option("--ranks", options.ranks, "world sizes, comma-separated (each >= 2)")
      ->delimiter(',');
  app.add_option("--steps", options.steps,
                 "reported gradient-set steps per job (after one warm-up)");
  app.add_option("--shrink", options.shrink,
                 "tensor elements and fusion threshold divided by this");
  app.add_option("--timeout", options.timeout_seconds, "TUTTI_TIMEOUT_SECONDS of every rank");
  app.add_option("--seed", options.seed, "shuffle seed");
  CLI11_PARSE(app, argc, argv);
  std::printf(
      "# cells: response cache on / off; medians over %d steps; only the last column is a "
      "wall time (%u cores here)\n",
      options.steps, std::thread::hardware_concurrency());
  printHeader();
  for (int size : options.ranks) {
    ModeFigures cached, uncached;
    tutti::Status st = size < 2 ? tutti::Status::invalidArgument("--ranks: each must be >= 2")
                                : runMode(size, true, options, &cached);
    if (st.isOk()) st = runMode(size, false, options, &uncached);
    if (!st.isOk()) {
      std::fprintf(stderr, "tutti-scale: N=%d: %s\n", size, st.toString().c_str());
      return 1;
    }
    printRow(size, cached, uncached);
    if (cached.heartbeats + uncached.heartbeats > 0) {
      std::printf("# N=%d: rank 0 sent or received %llu heartbeats during the steps\n", size,
                  static_cast<unsigned long long>(cached.heartbeats + uncached.heartbeats));
    }
  }
  return 0;
}

#pragma once

// ScaleJob: N ranks of a real Runtime as threads of this process over
// bench/scale_world.h (the harness of bench/scale, also run by
// tests/bench/scale_job_test.cc). Each step every rank enqueues ResNet-50's
// 161 gradient allreduces (bench/resnet50_shapes.h) in its own shuffled
// order, interleaved across ranks (tensor i of every rank, then tensor
// i + 1), and the step ends when every handle completed. Tensors are shrunk
// by `shrink` (elements / shrink, at least 1, the same number of dimensions:
// request and response bytes are those of the real shapes, since the wire
// packs every dimension in 8 bytes) and the fusion threshold with them, so
// that 1,024 ranks fit in memory and fusion groups what it would at full
// size.
//
// Threading: one thread drives a ScaleJob (start, step, shutdown); each
// rank's background thread runs inside it.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "bench/scale_world.h"
#include "coordinator/runtime.h"

namespace tutti::bench {

struct ScaleOptions {
  std::vector<int> ranks{16, 64, 256, 1024};  // bench/scale's world sizes
  int steps = 3;                              // reported steps per job, after one warm-up
  int64_t shrink = 1024;         // tensor elements and fusion threshold divided by this
  double timeout_seconds = 120;  // every rank's TUTTI_TIMEOUT_SECONDS (heartbeats: 1/4 of it)
  unsigned seed = 38;            // of the per-rank shuffles
};

// One step's figures: counter differences over the step.
struct StepFigures {
  ControlSnapshot rank0;
  ControlSnapshot worker;  // the last rank
  uint64_t cycles = 0;     // ResponseLists the last rank received
  double latency_s = 0;    // wall: last enqueue to every handle completed
};

// One job of N thread ranks; see the file comment.
class ScaleJob {
 public:
  using Clock = std::chrono::steady_clock;

  // `size` >= 2 ranks; cache: the response cache at its default capacity,
  // else TUTTI_CACHE_CAPACITY=0.
  ScaleJob(int size, bool cache, const ScaleOptions& options);
  ~ScaleJob();  // shutdown()
  // Creates the runtimes (Runtime::createConnected).
  Status start();
  // One gradient-set step (shuffles from *rng). Errors: kTimeout when some
  // handle did not complete within the timeout, kInternal when an allreduce
  // failed (the null backend's size check, a mismatch), or an enqueue's.
  Status step(std::mt19937* rng, StepFigures* out);
  // Shuts every runtime down (rank 0 first: it stops the job).
  Status shutdown();
  int size() const { return size_; }
  Runtime& runtime(int rank) { return *runtimes_[static_cast<size_t>(rank)]; }
  const ControlCounters& counters(int rank) const { return counters_[rank]; }
  // Collectives every rank's null backend checked (the same on every rank).
  uint64_t collectivesChecked() const { return ledger_.completed(); }

 private:
  Settings rankSettings(int rank) const;
  // Enqueues every rank's gradient set; *last is the last enqueue's time.
  Status enqueueAll(std::mt19937* rng, std::vector<std::vector<Handle>>* handles,
                    Clock::time_point* last);

  const int size_;
  const bool cache_;
  const ScaleOptions options_;
  testing::MemoryWorld world_;
  SizeLedger ledger_;
  std::unique_ptr<ControlCounters[]> counters_;
  std::vector<std::unique_ptr<Runtime>> runtimes_;
  std::vector<TensorView> views_;            // the gradient set, for every rank
  std::vector<size_t> offsets_;              // of each tensor in a rank's buffer
  std::vector<std::vector<float>> buffers_;  // by rank: every tensor, back to back
  std::vector<std::string> names_;
  // This step's completions: remaining handles, latest completion by rank.
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t remaining_ = 0;
  int64_t failures_ = 0;
  std::unique_ptr<std::atomic<int64_t>[]> done_ns_;
};

}  // namespace tutti::bench

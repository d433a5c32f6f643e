#pragma once

// The timeline: a Chrome trace (Trace Event Format, JSON) of what each tensor
// went through on this rank, for ui.perfetto.dev or chrome://tracing. How to
// record and read one: docs/timeline.md.
//
// File. start(path, rank) writes timelineFileName(path, rank): every rank
// writes its own file ("timeline.json" -> "timeline.rank0.json"). The file is
// the JSON array form: "[", then events separated by ",\n"; stop() appends
// "]". Each batch of events is written whole and ends with a complete event,
// so a job killed at any moment leaves a file that lacks only the closing "]",
// which both viewers add (test: append "]" and it is valid JSON).
//
// Events. pid = rank ("rank R" process); one track (tid) per tensor name,
// named by thread_name metadata, tracks in order of first appearance; ts/dur
// in microseconds of steady_clock (CLOCK_MONOTONIC), so the files of the ranks
// on one host share a time base and can be merged. On a tensor's track, in
// order, without overlap:
//   NEGOTIATE    enqueue -> this rank has the response (rank 0: decided, fused
//                and sent; workers: received). On rank 0 it starts at the
//                first rank's announcement when that was earlier, and holds an
//                instant "rank R ready" (args.rank) for every rank as its
//                request reached the controller: only rank 0 knows these.
//   QUEUE        response on this rank -> its execution starts (responses
//                ahead of it in the same list run first).
//   MEMCPY_IN_FUSION_BUFFER   staging into the fusion buffer (fused allreduce
//                and reducescatter only; otherwise the op span covers the
//                local copy and scaling too).
//   ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN:
//                the backend collective; args: bytes (the whole fused buffer),
//                tensors (how many were fused), dtype.
//   MEMCPY_OUT_FUSION_BUFFER  copy out of the fusion buffer and scaling.
//                (A fused allreduce runs in 1 MiB pieces: MEMCPY_IN is the
//                first piece's staging, the op span runs from the first
//                piece's collective to the last one's with the pieces'
//                copies in between, MEMCPY_OUT is the last piece's copy out.)
//   ERROR        instant: an error response (mismatch, stall); args.message.
// With mark_cycles, an instant CYCLE per background-loop round on the
// "cycles" track (tid 0). Dropped records show as an instant DROPPED there.
//
// Threading: every method is thread-safe. The record*() methods are what the
// background thread calls: when the timeline is off they cost one atomic
// load; when on, they append a small record to an in-memory queue under a
// mutex and never do file I/O. A writer thread owned by the Timeline formats
// and writes the records in batches, at least every kFlushInterval while
// records arrive; it sleeps on a condition variable when there are none.
// Memory is bounded: beyond kMaxPendingNames unwritten tensor names, records
// are dropped and counted (a warning in the log and a DROPPED event).
// start() and stop() block for file I/O and, stop(), for the writer to drain.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/tensor_queue.h"
#include "core/message.h"
#include "core/status.h"

namespace tutti {

// `path` with ".rank<R>" inserted before the extension of its file name:
// "t.json" -> "t.rank0.json", "dir/t" -> "dir/t.rank0".
std::string timelineFileName(const std::string& path, int rank);

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFlushInterval{50};
  static constexpr int64_t kMaxPendingNames = 1 << 17;

  // Times of one executed Response on this rank (see the event list above).
  // collective_start/end are unset (epoch) when nothing was staged.
  struct ExecutionTimes {
    Clock::time_point listed;  // this rank has the response
    Clock::time_point start;   // execution starts
    Clock::time_point collective_start;
    Clock::time_point collective_end;
    Clock::time_point end;
  };

  Timeline() = default;
  ~Timeline();  // stop()
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Creates (truncates) timelineFileName(path, rank), writes the header and
  // starts the writer thread. Errors: kInvalidArgument for an empty path or
  // when already recording (naming that file), kIoError when the file cannot
  // be created (naming it and errno's text).
  Status start(const std::string& path, int rank, bool mark_cycles);
  // Writes what is queued, closes the array and the file, joins the writer.
  // OK (and nothing) when not recording; kIoError if a write had failed.
  Status stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // Rank 0: `rank`'s request for `name` reached the controller at `t`.
  void recordReady(const std::string& name, int rank, Clock::time_point t);
  // An op Response executed; entries[i] is this rank's entry for
  // response.names[i] or nullptr (a joined rank).
  void recordExecution(const Response& response, const std::vector<const TensorEntry*>& entries,
                       const ExecutionTimes& times);
  // An error Response was delivered at `listed`.
  void recordError(const Response& response, const std::vector<const TensorEntry*>& entries,
                   Clock::time_point listed);
  // A background-loop round began (written only with mark_cycles).
  void recordCycle(Clock::time_point t);

 private:
  struct Record {
    enum class Kind : uint8_t { kReady, kExecution, kError, kCycle };
    Kind kind = Kind::kCycle;
    OpType op = OpType::kAllreduce;
    DataType dtype = DataType::kFloat32;
    int rank = 0;       // kReady
    int64_t bytes = 0;  // kExecution
    std::vector<std::string> names;
    std::vector<int64_t> enqueued_ns;  // per name; 0 = unknown (joined rank)
    int64_t listed_ns = 0, start_ns = 0, collective_start_ns = 0, collective_end_ns = 0, end_ns = 0;
    std::string message;  // kError
  };
  class Writer;  // formatting state of the writer thread (timeline.cc)

  // The names, dtype, op and enqueue times of `response` on this rank.
  static Record responseRecord(Record::Kind kind, const Response& response,
                               const std::vector<const TensorEntry*>& entries,
                               Clock::time_point listed);
  void push(Record record);
  void writerLoop(int fd, int rank);

  std::mutex lifecycle_mu_;  // serialises start() and stop()
  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  std::string file_name_;
  std::thread writer_;

  std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::vector<Record> pending_;
  int64_t pending_names_ = 0;
  int64_t dropped_ = 0;  // records dropped since the writer last looked
  bool stopping_ = false;
  Status write_status_;  // first write error of the writer
};

}  // namespace tutti

#include "coordinator/timeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/logging.h"

namespace tutti {

namespace {

using json = nlohmann::json;

int64_t toNs(Timeline::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

double toUs(int64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

std::string upper(const char* text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

// Tensor names are user text: invalid UTF-8 is replaced, never thrown.
std::string dump(const json& event) {
  return event.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Writes all of `text`, retrying on EINTR and short writes.
Status writeAll(int fd, const std::string& text, const std::string& file) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::ioError("writing the timeline file '" + file +
                             "' failed: " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

// "[" and the process's name: the file is a loadable (empty) trace from the
// first byte on, and every later event is appended as ",\n{...}".
std::string headerText(int rank) {
  json name = {{"name", "process_name"},
               {"ph", "M"},
               {"pid", rank},
               {"args", {{"name", "rank " + std::to_string(rank)}}}};
  json sort = {
      {"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"args", {{"sort_index", rank}}}};
  return "[\n" + dump(name) + ",\n" + dump(sort);
}

}  // namespace

std::string timelineFileName(const std::string& path, int rank) {
  const size_t slash = path.find_last_of('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.find_last_of('.');
  // No extension: a name without a dot, or only a leading one (".trace").
  if (dot == std::string::npos || dot <= base) dot = path.size();
  return path.substr(0, dot) + ".rank" + std::to_string(rank) + path.substr(dot);
}

// Turns records into events. Owned by the writer thread; keeps the track
// (tid) of every tensor name and, on rank 0, the first "ready" mark of the
// negotiation in progress so that NEGOTIATE starts no later than it.
class Timeline::Writer {
 public:
  explicit Writer(int rank) : rank_(rank) {}

  void format(const Record& r, std::string* out) {
    switch (r.kind) {
      case Record::Kind::kCycle:
        instant("CYCLE", cyclesTrack(out), r.start_ns, json::object(), out);
        return;
      case Record::Kind::kReady: {
        Track& t = track(r.names[0], out);
        if (t.first_ready_ns == 0) t.first_ready_ns = r.start_ns;
        instant("rank " + std::to_string(r.rank) + " ready", t.tid, r.start_ns, {{"rank", r.rank}},
                out);
        return;
      }
      case Record::Kind::kExecution:
      case Record::Kind::kError:
        for (size_t i = 0; i < r.names.size(); ++i) formatTensor(r, i, out);
        return;
    }
  }

  void dropped(int64_t count, int64_t ts_ns, std::string* out) {
    instant("DROPPED", cyclesTrack(out), ts_ns, {{"records", count}}, out);
  }

 private:
  struct Track {
    int tid = 0;
    int64_t first_ready_ns = 0;  // 0: no ready mark since the last response
  };

  void formatTensor(const Record& r, size_t i, std::string* out) {
    Track& t = track(r.names[i], out);
    int64_t begin = r.enqueued_ns[i] != 0 ? r.enqueued_ns[i] : r.listed_ns;
    if (t.first_ready_ns != 0) begin = std::min(begin, t.first_ready_ns);
    t.first_ready_ns = 0;
    span("NEGOTIATE", t.tid, begin, r.listed_ns, {{"op", opTypeName(r.op)}}, out);
    if (r.kind == Record::Kind::kError) {
      instant("ERROR", t.tid, r.listed_ns, {{"message", r.message}}, out);
      return;
    }
    span("QUEUE", t.tid, r.listed_ns, r.start_ns, json::object(), out);
    const json args = {
        {"bytes", r.bytes}, {"tensors", r.names.size()}, {"dtype", dataTypeName(r.dtype)}};
    const std::string op = upper(opTypeName(r.op));
    if (r.collective_start_ns == 0) {
      span(op, t.tid, r.start_ns, r.end_ns, args, out);
      return;
    }
    span("MEMCPY_IN_FUSION_BUFFER", t.tid, r.start_ns, r.collective_start_ns, json::object(), out);
    span(op, t.tid, r.collective_start_ns, r.collective_end_ns, args, out);
    span("MEMCPY_OUT_FUSION_BUFFER", t.tid, r.collective_end_ns, r.end_ns, json::object(), out);
  }

  Track& track(const std::string& name, std::string* out) {
    auto it = tracks_.find(name);
    if (it != tracks_.end()) return it->second;
    Track& t = tracks_[name];
    t.tid = next_tid_++;
    nameTrack(t.tid, name, out);
    return t;
  }

  int cyclesTrack(std::string* out) {
    if (!cycles_named_) {
      cycles_named_ = true;
      nameTrack(0, "cycles", out);
    }
    return 0;
  }

  void nameTrack(int tid, const std::string& name, std::string* out) {
    append({{"name", "thread_name"}, {"ph", "M"}, {"tid", tid}, {"args", {{"name", name}}}}, out);
    append(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"tid", tid}, {"args", {{"sort_index", tid}}}},
        out);
  }

  void span(const std::string& name, int tid, int64_t begin_ns, int64_t end_ns, json args,
            std::string* out) {
    append({{"name", name},
            {"ph", "X"},
            {"tid", tid},
            {"ts", toUs(begin_ns)},
            {"dur", toUs(std::max<int64_t>(0, end_ns - begin_ns))},
            {"args", std::move(args)}},
           out);
  }

  void instant(const std::string& name, int tid, int64_t ts_ns, json args, std::string* out) {
    append({{"name", name},
            {"ph", "i"},
            {"s", "t"},
            {"tid", tid},
            {"ts", toUs(ts_ns)},
            {"args", std::move(args)}},
           out);
  }

  void append(json event, std::string* out) {
    event["pid"] = rank_;
    *out += ",\n";
    *out += dump(event);
  }

  const int rank_;
  std::unordered_map<std::string, Track> tracks_;
  int next_tid_ = 1;  // 0 is the cycles track
  bool cycles_named_ = false;
};

Timeline::~Timeline() {
  stop();
}

Status Timeline::start(const std::string& path, int rank, bool mark_cycles) {
  std::lock_guard<std::mutex> life(lifecycle_mu_);
  if (path.empty()) return Status::invalidArgument("timeline: the file path is empty");
  if (writer_.joinable()) {
    return Status::invalidArgument("a timeline is already being recorded to '" + file_name_ +
                                   "': stop it before starting another");
  }
  struct stat info;
  if (path.back() == '/' || (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode))) {
    const std::string dir = path.back() == '/' ? path.substr(0, path.size() - 1) : path;
    return Status::invalidArgument(
        "timeline: '" + path + "' is a directory; give a file path such as '" + dir +
        "/timeline.json' (each rank writes '" + dir + "/timeline.rank<R>.json')");
  }
  const std::string file = timelineFileName(path, rank);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::ioError("cannot create the timeline file '" + file +
                           "': " + std::strerror(errno));
  }
  Status st = writeAll(fd, headerText(rank), file);
  if (!st.isOk()) {
    ::close(fd);
    return st;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.clear();
    pending_names_ = 0;
    dropped_ = 0;
    stopping_ = false;
    write_status_ = Status::ok();
  }
  file_name_ = file;
  mark_cycles_.store(mark_cycles);
  writer_ = std::thread([this, fd, rank] { writerLoop(fd, rank); });
  active_.store(true);
  return Status::ok();
}

Status Timeline::stop() {
  std::lock_guard<std::mutex> life(lifecycle_mu_);
  if (!writer_.joinable()) return Status::ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_.store(false);  // under mu_: no push() lands after the writer's last batch
    stopping_ = true;
  }
  cv_.notify_one();
  writer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return write_status_;
}

void Timeline::push(Record record) {
  const int64_t names = std::max<int64_t>(1, static_cast<int64_t>(record.names.size()));
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_.load(std::memory_order_relaxed)) return;  // stopped meanwhile
    if (pending_names_ + names > kMaxPendingNames) {
      ++dropped_;
      return;
    }
    // Wake the writer for the first record of a batch, and early when the
    // queue is half full.
    const int64_t half = kMaxPendingNames / 2;
    wake = pending_.empty() || (pending_names_ < half && pending_names_ + names >= half);
    pending_names_ += names;
    pending_.push_back(std::move(record));
  }
  if (wake) cv_.notify_one();
}

void Timeline::writerLoop(int fd, int rank) {
  Writer writer(rank);
  std::vector<Record> batch;
  std::string text;
  int64_t dropped_total = 0;
  bool failed = false;
  while (true) {
    int64_t dropped = 0;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !pending_.empty() || stopping_; });
      // Gather for a while: one write per batch, not one per record.
      cv_.wait_for(lock, kFlushInterval,
                   [&] { return stopping_ || pending_names_ >= kMaxPendingNames / 2; });
      batch.swap(pending_);
      pending_names_ = 0;
      dropped = dropped_;
      dropped_ = 0;
      stop = stopping_;
    }
    text.clear();
    for (const Record& r : batch) writer.format(r, &text);
    batch.clear();
    if (dropped > 0) {
      if (dropped_total == 0) {
        TUTTI_LOG(kWarning) << "timeline: the writer fell behind; dropping records (counted in "
                               "DROPPED events of '"
                            << file_name_ << "')";
      }
      dropped_total += dropped;
      writer.dropped(dropped, toNs(Clock::now()), &text);
    }
    if (stop) text += "\n]\n";
    if (!failed && !text.empty()) {
      Status st = writeAll(fd, text, file_name_);
      if (!st.isOk()) {
        failed = true;  // keep draining so that producers never block
        TUTTI_LOG(kError) << "timeline: " << st.message() << "; no more events are written";
        std::lock_guard<std::mutex> lock(mu_);
        write_status_ = st;
      }
    }
    if (stop) break;
  }
  if (dropped_total > 0) {
    TUTTI_LOG(kWarning) << "timeline: " << dropped_total << " records were dropped from '"
                        << file_name_ << "' because the writer fell behind";
  }
  ::close(fd);
}

Timeline::Record Timeline::responseRecord(Record::Kind kind, const Response& response,
                                          const std::vector<const TensorEntry*>& entries,
                                          Clock::time_point listed) {
  Record r;
  r.kind = kind;
  r.op = response.type;
  r.dtype = response.dtype;
  r.names = response.names;
  for (std::string& name : r.names) name = displayName(response.process_set, name);
  r.enqueued_ns.resize(r.names.size(), 0);
  for (size_t i = 0; i < r.names.size() && i < entries.size(); ++i) {
    if (entries[i] != nullptr) r.enqueued_ns[i] = toNs(entries[i]->enqueued);
  }
  r.listed_ns = toNs(listed);
  return r;
}

void Timeline::recordReady(const std::string& name, int rank, Clock::time_point t) {
  if (!active()) return;
  Record r;
  r.kind = Record::Kind::kReady;
  r.names.push_back(name);
  r.rank = rank;
  r.start_ns = toNs(t);
  push(std::move(r));
}

void Timeline::recordExecution(const Response& response,
                               const std::vector<const TensorEntry*>& entries,
                               const ExecutionTimes& times) {
  if (!active()) return;
  Record r = responseRecord(Record::Kind::kExecution, response, entries, times.listed);
  r.start_ns = toNs(times.start);
  r.collective_start_ns = toNs(times.collective_start);
  r.collective_end_ns = toNs(times.collective_end);
  r.end_ns = toNs(times.end);
  if (response.type == OpType::kAllreduce && response.sizes.size() == response.names.size()) {
    // The whole (fused) buffer, joined ranks' zeros included.
    for (int64_t n : response.sizes) r.bytes += n;
    r.bytes *= static_cast<int64_t>(dataTypeSize(response.dtype));
  } else {
    for (const TensorEntry* e : entries) {
      if (e != nullptr) r.bytes += static_cast<int64_t>(e->input.numBytes());
    }
  }
  push(std::move(r));
}

void Timeline::recordError(const Response& response, const std::vector<const TensorEntry*>& entries,
                           Clock::time_point listed) {
  if (!active()) return;
  Record r = responseRecord(Record::Kind::kError, response, entries, listed);
  r.message = response.error_message;
  push(std::move(r));
}

void Timeline::recordCycle(Clock::time_point t) {
  if (!active() || !mark_cycles_.load(std::memory_order_relaxed)) return;
  Record r;
  r.kind = Record::Kind::kCycle;
  r.start_ns = toNs(t);
  push(std::move(r));
}

}  // namespace tutti

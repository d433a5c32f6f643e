#include "core/settings.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <type_traits>

#include "core/compression_spec.h"
#include "core/slurm.h"

namespace tutti {
namespace {

constexpr double kMaxInt = 9.0e15;

std::string formatNumber(double v) {
  // Integral values print as integers ("1048576", not "1.04858e+06").
  if (std::fabs(v) < 9.3e18 && v == std::floor(v)) {
    return std::to_string(static_cast<long long>(v));
  }
  std::ostringstream out;
  out << std::setprecision(15) << v;
  return out.str();
}

// A default as it would appear in the environment, from Settings' initialisers.
std::string text(double v) {
  return formatNumber(v);
}
std::string text(const std::string& v) {
  return v;
}

// Where this rank is in the job, the rendezvous and the secret; `d`: the defaults.
std::vector<SettingSpec> placementSpecs(const Settings& d) {
  return {
      {"TUTTI_RANK", SettingType::kInt, text(d.rank), 0, 1 << 20, "",
       "rank of this process in the job (unset in an srun task: the placement, rendezvous host "
       "and port come from Slurm's variables, core/slurm.h)"},
      {"TUTTI_SIZE", SettingType::kInt, text(d.size), 1, 1 << 20, "",
       "number of ranks in the job (world size)"},
      {"TUTTI_LOCAL_RANK", SettingType::kInt, "", 0, 1 << 20, "",
       "rank among the ranks on this host (default: TUTTI_RANK)"},
      {"TUTTI_LOCAL_SIZE", SettingType::kInt, "", 1, 1 << 20, "",
       "ranks on this host (default: TUTTI_SIZE)"},
      {"TUTTI_CROSS_RANK", SettingType::kInt, text(d.cross_rank), 0, 1 << 20, "",
       "index of this host among the job's hosts"},
      {"TUTTI_CROSS_SIZE", SettingType::kInt, text(d.cross_size), 1, 1 << 20, "",
       "number of hosts in the job"},
      {"TUTTI_RENDEZVOUS_ADDR", SettingType::kString, text(d.rendezvous_addr), 0, 0, "",
       "address of the rendezvous server (hosted by tuttirun, or by rank 0 without it)"},
      {"TUTTI_RENDEZVOUS_PORT", SettingType::kInt, text(d.rendezvous_port), 1, 65535, "",
       "TCP port of the rendezvous server"},
      {"TUTTI_RENDEZVOUS_SERVER", SettingType::kChoice,
       d.rank0_hosts_rendezvous ? "rank0" : "external", 0, 0, "rank0,external",
       "who serves the rendezvous: rank0 (a program started by hand) or external (tuttirun)"},
      {"TUTTI_SECRET", SettingType::kString, text(d.secret), 0, 0, "",
       "per-job secret every connection proves it knows (set by tuttirun; required when size > 1)"},
      {"TUTTI_HOSTNAME", SettingType::kString, text(d.hostname), 0, 0, "",
       "address other ranks use to reach this rank (default: the address this host uses to reach "
       "the "
       "rendezvous server)"},
  };
}

// The runtime's knobs; `d`: the defaults.
std::vector<SettingSpec> runtimeSpecs(const Settings& d) {
  return {
      {"TUTTI_FUSION_THRESHOLD_BYTES", SettingType::kInt, text(d.fusion_threshold_bytes), 0,
       kMaxInt, "", "fusion buffer size in bytes; 0 disables fusion"},
      {"TUTTI_CYCLE_TIME_MS", SettingType::kDouble, text(d.cycle_time_ms), 0, 10000, "",
       "milliseconds to wait before each negotiation round (0: start a round as soon as work is "
       "queued)"},
      {"TUTTI_CACHE_CAPACITY", SettingType::kInt, text(d.cache_capacity), 0, 1 << 24, "",
       "entries in the response cache; 0 disables it"},
      {"TUTTI_STALL_CHECK_TIME_SECONDS", SettingType::kDouble, text(d.stall_check_time_seconds), 0,
       1e7, "",
       "seconds before a tensor not submitted by every rank is reported as stalled (0: never)"},
      {"TUTTI_STALL_SHUTDOWN_TIME_SECONDS", SettingType::kDouble,
       text(d.stall_shutdown_time_seconds), 0, 1e7, "",
       "seconds after which stalled ops fail on every rank (the default is torch.distributed's "
       "timeout; 0: never, they only warn)"},
      {"TUTTI_TIMEOUT_SECONDS", SettingType::kDouble, text(d.timeout_seconds), 0.001, 1e7, "",
       "seconds to wait for peers at start, and for a silent peer connection (dead host, cut "
       "link: TCP keepalive) before that peer is declared lost; a hung peer process whose host "
       "still answers is a stall instead (TUTTI_STALL_*); mpi backend: the longest an MPI "
       "collective or message may wait without progress (then the job ends with MPI_Abort), and "
       "the bound of MPI_Finalize at exit"},
      {"TUTTI_ORDERED_TIMEOUT_SECONDS", SettingType::kDouble, text(d.ordered_timeout_seconds), 0,
       1e7, "",
       "seconds an ordered collective (torch.distributed's) waits for a peer that sends nothing "
       "(a rank that never issues it) before that peer is declared lost (0: never; a dead peer "
       "is still lost within TUTTI_TIMEOUT_SECONDS)"},
      {"TUTTI_ORDERED_INLINE_BYTES", SettingType::kInt, text(d.ordered_inline_bytes), 0, kMaxInt,
       "",
       "ordered collectives whose data, over all ranks of the set, is at most this many bytes "
       "send it with their signature: one exchange, finished locally (0: never)"},
      {"TUTTI_ORDERED_HANDOFF_US", SettingType::kInt, text(d.ordered_handoff_us), 0, 10000000, "",
       "microseconds a queued ordered collective waits for a thread that waits on it to run it, "
       "before the lane's own thread runs it"},
      {"TUTTI_ORDERED_SPIN_US", SettingType::kInt, text(d.ordered_spin_us), 0, 1000000, "",
       "microseconds an ordered collective's wait polls its connections before it sleeps "
       "(waking costs tens of microseconds on a busy host; only while an op is in flight)"},
      {"TUTTI_ORDERED_EXECUTION", SettingType::kChoice, text(d.ordered_execution), 0, 0,
       "caller,thread",
       "who runs an ordered collective: caller (the thread that waits for it, else the lane's "
       "thread after TUTTI_ORDERED_HANDOFF_US) or thread (always the lane's thread; measured "
       "slower, kept for comparison)"},
      {"TUTTI_SEGMENT_BYTES", SettingType::kInt, text(d.segment_bytes), 1, kMaxInt, "",
       "bytes per pipelined segment of ring collectives"},
      {"TUTTI_ALGORITHMS", SettingType::kString, text(d.algorithms), 0, 0, "",
       "tcp backend: algorithm choices that go before the built-in ones, comma-separated "
       "COLLECTIVE:LO-HI:NAME with byte ranges (k/m/g suffixes; HI empty or inf: no limit), "
       "e.g. allreduce:0-4k:recursive_doubling,broadcast:0-64k:binomial; the same on every rank; "
       "tuttirun --check-build lists the algorithms and their default ranges"},
      {"TUTTI_HIERARCHICAL_ALLREDUCE", SettingType::kChoice, text(d.hierarchical_allreduce), 0, 0,
       "auto,1,0",
       "tcp backend: hierarchical allreduce (reduce-scatter within each host, allreduce across "
       "hosts, allgather within each host; hosts from TUTTI_CROSS_RANK): auto = the algorithm "
       "table chooses it above its recursive-doubling range when there are several hosts with "
       "the same number (> 1) of ranks each; 1 = for every size where the placement allows it; "
       "0 = never; the same on every rank"},
      {"TUTTI_HIERARCHICAL_ALLGATHER", SettingType::kChoice, text(d.hierarchical_allgather), 0, 0,
       "auto,1,0",
       "tcp backend: hierarchical allgather (allgather across hosts of each local index's "
       "blocks, then within each host): auto = above 64 KiB of output where the placement "
       "allows it (as TUTTI_HIERARCHICAL_ALLREDUCE); 1 = every size where it allows it; "
       "0 = never; the same on every rank"},
      {"TUTTI_SHM", SettingType::kChoice, text(d.shm), 0, 0, "auto,off",
       "shared memory between ranks on the same host: auto = data between two ranks of one host "
       "goes through a shared-memory ring instead of loopback TCP; off = always TCP"},
      {"TUTTI_TIMELINE", SettingType::kString, text(d.timeline), 0, 0, "",
       "write a Chrome-trace timeline: each rank writes this path with .rank<R> inserted before "
       "the extension (docs/timeline.md)"},
      {"TUTTI_TIMELINE_MARK_CYCLES", SettingType::kInt, text(d.timeline_mark_cycles), 0, 1, "",
       "1: the timeline also marks every background-loop round"},
      {"TUTTI_BACKEND", SettingType::kChoice, "auto", 0, 0, "auto,tcp,mpi,nccl",
       "collective backend: tcp, mpi, nccl (when built; see tuttirun --check-build), or auto = mpi "
       "when the job runs under Open MPI's mpirun, else tcp. nccl: CUDA tensors through NCCL (one "
       "GPU per rank), host tensors and negotiation through tcp; with the others CUDA tensors are "
       "staged through pinned host memory (several ranks may share a GPU)"},
      {"TUTTI_COMPRESSION", SettingType::kCompression, text(d.compression), 0, 0, "",
       "default gradient compression of float allreduce (sum/average) where the op does not choose "
       "one (C API: empty spec; Python: compression=None, DistributedOptimizer): none, fp16, bf16, "
       "topk:<ratio>[:warmup=<steps>], int8[:<block>]; integer tensors and other ops are never "
       "compressed"},
      {"TUTTI_COMPRESSION_ZSTD_LEVEL", SettingType::kInt, text(d.compression_zstd_level), 0, 19, "",
       "zstd level for the tcp backend's data sent over TCP (not shared memory), per frame, "
       "sent raw where it does not save 10 % (0: off, the plain byte stream); the same on every "
       "rank (checked at connect)"},
      {"TUTTI_ELASTIC_WORKER_ID", SettingType::kInt, text(d.elastic_worker_id), -1, 2147483647, "",
       "elastic training: this worker's job-unique id, set by tuttirun's elastic driver; init then "
       "joins the driver's next membership generation (-1: not elastic; docs/elastic.md)"},
      {"TUTTI_ELASTIC_TIMEOUT_SECONDS", SettingType::kDouble, text(d.elastic_timeout_seconds),
       0.001, 1e7, "",
       "elastic training: seconds a joining worker waits for a generation that includes it and for "
       "its members to meet"},
      {"TUTTI_AUTOTUNE", SettingType::kInt, text(d.autotune), 0, 1, "",
       "1: tune TUTTI_FUSION_THRESHOLD_BYTES, TUTTI_CYCLE_TIME_MS and the response cache on or off "
       "during the first steps by Bayesian optimisation, as HOROVOD_AUTOTUNE does (knobs set in "
       "the environment stay fixed); rank 0 logs the best values at info (docs/autotune.md)"},
      {"TUTTI_AUTOTUNE_LOG", SettingType::kString, text(d.autotune_log), 0, 0, "",
       "autotune: rank 0 writes a CSV row per scored sample (Horovod's columns) to this path"},
      {"TUTTI_AUTOTUNE_WARMUP_SAMPLES", SettingType::kInt, text(d.autotune_warmup_samples), 0, 1000,
       "", "autotune: samples discarded before scoring starts"},
      {"TUTTI_AUTOTUNE_STEPS_PER_SAMPLE", SettingType::kInt, text(d.autotune_steps_per_sample), 1,
       1000000, "",
       "autotune: steps (allreduces of each tensor) per sub-sample; a sample's score is the "
       "median of 5 sub-samples"},
      {"TUTTI_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", SettingType::kInt,
       text(d.autotune_bayes_opt_max_samples), 1, 1000, "",
       "autotune: samples of the Bayesian-optimisation stage (its test points included)"},
      {"TUTTI_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", SettingType::kDouble,
       text(d.autotune_gaussian_process_noise), 0, 100, "",
       "autotune: noise (standard deviation, in units of the normalised score) of the Gaussian "
       "process"},
      {"TUTTI_LOG_LEVEL", SettingType::kChoice, text(d.log_level), 0, 0,
       "trace,debug,info,warning,error", "least severe log level printed"},
  };
}

// Built on first use (flag tables of other files read it while they are
// initialised).
const std::vector<SettingSpec>& specTable() {
  static const std::vector<SettingSpec> specs = [] {
    const Settings d;
    std::vector<SettingSpec> all = placementSpecs(d);
    for (SettingSpec& spec : runtimeSpecs(d)) all.push_back(std::move(spec));
    return all;
  }();
  return specs;
}

std::string rangeText(const SettingSpec& spec) {
  std::ostringstream out;
  switch (spec.type) {
    case SettingType::kInt:
      out << "an integer in [" << formatNumber(spec.min) << ", " << formatNumber(spec.max) << "]";
      break;
    case SettingType::kDouble:
      out << "a number in [" << formatNumber(spec.min) << ", " << formatNumber(spec.max) << "]";
      break;
    case SettingType::kString:
      out << "a non-empty string";
      break;
    case SettingType::kChoice:
      out << "one of {" << spec.choices << "}";
      break;
    case SettingType::kCompression:
      out << "a compression spec: " << compressionSpecHelp();
      break;
  }
  return out.str();
}

Status badValue(const SettingSpec& spec, const std::string& value) {
  return Status::invalidArgument(std::string(spec.name) + "=" + value + ": expected " +
                                 rangeText(spec) + " (" + spec.help + ")");
}

// Set by Open MPI's mpirun in every process it starts.
constexpr const char* kMpirunSizeVar = "OMPI_COMM_WORLD_SIZE";

// Fills rank, size, local rank and local size from Open MPI's variables
// where the TUTTI_* variable is unset.
Status mpirunPlacement(const EnvLookup& env, Settings* s) {
  struct Field {
    const char* tutti;
    const char* ompi;
    int* value;
  };
  const Field fields[] = {{"TUTTI_RANK", "OMPI_COMM_WORLD_RANK", &s->rank},
                          {"TUTTI_SIZE", kMpirunSizeVar, &s->size},
                          {"TUTTI_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", &s->local_rank},
                          {"TUTTI_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", &s->local_size}};
  for (const Field& f : fields) {
    if (env(f.tutti).has_value()) continue;
    auto v = env(f.ompi);
    if (!v.has_value()) continue;
    errno = 0;
    char* end = nullptr;
    long long n = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || errno != 0 || n < 0 || n > (1 << 20)) {
      return Status::invalidArgument(std::string(f.ompi) + "=" + *v +
                                     ": expected an integer (set by mpirun)");
    }
    *f.value = static_cast<int>(n);
  }
  return Status::ok();
}

}  // namespace

const std::vector<SettingSpec>& settingSpecs() {
  return specTable();
}

const SettingSpec* findSettingSpec(const std::string& name) {
  for (const auto& spec : specTable()) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

Status validateSetting(const SettingSpec& spec, const std::string& value) {
  switch (spec.type) {
    case SettingType::kInt: {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(value.c_str(), &end, 10);
      // The whole value, also past an embedded NUL ("\0" 1 is not a number).
      if (value.empty() || end != value.c_str() + value.size() || errno != 0 || v < spec.min ||
          v > spec.max) {
        return badValue(spec, value);
      }
      return Status::ok();
    }
    case SettingType::kDouble: {
      errno = 0;
      char* end = nullptr;
      double v = std::strtod(value.c_str(), &end);
      if (value.empty() || end != value.c_str() + value.size() || errno != 0 || !std::isfinite(v) ||
          v < spec.min || v > spec.max) {
        return badValue(spec, value);
      }
      return Status::ok();
    }
    case SettingType::kString:
      if (value.empty()) return badValue(spec, value);
      return Status::ok();
    case SettingType::kChoice: {
      std::stringstream choices(spec.choices);
      std::string choice;
      while (std::getline(choices, choice, ',')) {
        if (choice == value) return Status::ok();
      }
      return badValue(spec, value);
    }
    case SettingType::kCompression: {
      CompressionSpec parsed;
      Status st = parseCompressionSpec(value, &parsed);
      if (!st.isOk()) {
        return Status::invalidArgument(std::string(spec.name) + "=" + value +
                                       ": expected a compression spec (" + st.message() + ")");
      }
      return Status::ok();
    }
  }
  return Status::internal("unknown setting type");
}

EnvLookup mapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

EnvLookup processEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

// Reads settings from the environment, each validated against its spec; an
// unset variable gives the spec's default ("" when it has none, which leaves
// a numeric field at its initialiser).
class EnvReader {
 public:
  explicit EnvReader(const EnvLookup& env) : env_(env) {}

  // The validated value of a setting, or its default.
  Status text(const char* name, std::string* value) const {
    const SettingSpec* spec = findSettingSpec(name);
    auto v = env_(name);
    if (!v.has_value()) {
      *value = spec->default_value;
      return Status::ok();
    }
    TUTTI_RETURN_IF_ERROR(validateSetting(*spec, *v));
    *value = *v;
    return Status::ok();
  }
  // An integer, bool or double setting (validated, so the conversion cannot fail).
  template <typename T>
  Status number(const char* name, T* field) const {
    std::string v;
    TUTTI_RETURN_IF_ERROR(text(name, &v));
    if (v.empty()) return Status::ok();
    if constexpr (std::is_floating_point_v<T>) {
      *field = std::stod(v);
    } else {
      *field = static_cast<T>(std::stoll(v));
    }
    return Status::ok();
  }

 private:
  const EnvLookup& env_;
};

// Rank, size and the rest of the placement, the rendezvous and the secret.
// `under_mpirun`: Open MPI's variables fill what TUTTI_* leaves unset (mpi backend).
Status readPlacement(const EnvReader& r, const EnvLookup& env, bool under_mpirun, Settings* s) {
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_RANK", &s->rank));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_SIZE", &s->size));
  s->local_rank = s->rank;
  s->local_size = s->size;
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_LOCAL_RANK", &s->local_rank));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_LOCAL_SIZE", &s->local_size));
  if (s->backend == "mpi" && under_mpirun) {
    // mpirun's own placement (the same as MPI_COMM_WORLD's, which the mpi
    // backend checks) wherever TUTTI_* does not say otherwise.
    TUTTI_RETURN_IF_ERROR(mpirunPlacement(env, s));
  }
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_CROSS_RANK", &s->cross_rank));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_CROSS_SIZE", &s->cross_size));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_RENDEZVOUS_ADDR", &s->rendezvous_addr));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_RENDEZVOUS_PORT", &s->rendezvous_port));
  std::string server;
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_RENDEZVOUS_SERVER", &server));
  s->rank0_hosts_rendezvous = (server == "rank0");
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_SECRET", &s->secret));
  return r.text("TUTTI_HOSTNAME", &s->hostname);
}

// Autotune's switch and knobs.
Status readAutotune(const EnvReader& r, Settings* s) {
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_AUTOTUNE", &s->autotune));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_AUTOTUNE_LOG", &s->autotune_log));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_AUTOTUNE_WARMUP_SAMPLES", &s->autotune_warmup_samples));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_AUTOTUNE_STEPS_PER_SAMPLE", &s->autotune_steps_per_sample));
  TUTTI_RETURN_IF_ERROR(
      r.number("TUTTI_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", &s->autotune_bayes_opt_max_samples));
  return r.number("TUTTI_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", &s->autotune_gaussian_process_noise);
}

// The runtime knobs: fusion, cycle, cache, stall, timeouts, algorithms,
// timeline, logging, compression, elastic.
Status readKnobs(const EnvReader& r, Settings* s) {
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_FUSION_THRESHOLD_BYTES", &s->fusion_threshold_bytes));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_CYCLE_TIME_MS", &s->cycle_time_ms));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_CACHE_CAPACITY", &s->cache_capacity));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_STALL_CHECK_TIME_SECONDS", &s->stall_check_time_seconds));
  TUTTI_RETURN_IF_ERROR(
      r.number("TUTTI_STALL_SHUTDOWN_TIME_SECONDS", &s->stall_shutdown_time_seconds));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_TIMEOUT_SECONDS", &s->timeout_seconds));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_ORDERED_TIMEOUT_SECONDS", &s->ordered_timeout_seconds));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_ORDERED_INLINE_BYTES", &s->ordered_inline_bytes));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_ORDERED_HANDOFF_US", &s->ordered_handoff_us));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_ORDERED_SPIN_US", &s->ordered_spin_us));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_ORDERED_EXECUTION", &s->ordered_execution));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_SEGMENT_BYTES", &s->segment_bytes));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_ALGORITHMS", &s->algorithms));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_HIERARCHICAL_ALLREDUCE", &s->hierarchical_allreduce));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_HIERARCHICAL_ALLGATHER", &s->hierarchical_allgather));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_SHM", &s->shm));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_TIMELINE", &s->timeline));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_TIMELINE_MARK_CYCLES", &s->timeline_mark_cycles));
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_LOG_LEVEL", &s->log_level));
  std::string compression;
  TUTTI_RETURN_IF_ERROR(r.text("TUTTI_COMPRESSION", &compression));
  TUTTI_RETURN_IF_ERROR(canonicalizeCompressionSpec(compression, &s->compression));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_COMPRESSION_ZSTD_LEVEL", &s->compression_zstd_level));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_ELASTIC_WORKER_ID", &s->elastic_worker_id));
  TUTTI_RETURN_IF_ERROR(r.number("TUTTI_ELASTIC_TIMEOUT_SECONDS", &s->elastic_timeout_seconds));
  return readAutotune(r, s);
}

// "TUTTI_RANK=5: expected an integer in [0, TUTTI_SIZE-1] = [0, 3]" when rank >= size.
Status checkRankBelowSize(const char* rank_name, int rank, const char* size_name, int size) {
  if (rank < size) return Status::ok();
  return Status::invalidArgument(std::string(rank_name) + "=" + std::to_string(rank) +
                                 ": expected an integer in [0, " + size_name + "-1] = [0, " +
                                 std::to_string(size - 1) + "]");
}

// Rules across settings: ranks within their sizes, elastic needs tcp, a
// secret for more than one rank (also under Slurm's srun).
Status checkSettings(const Settings& s, bool under_mpirun, bool slurm) {
  TUTTI_RETURN_IF_ERROR(checkRankBelowSize("TUTTI_RANK", s.rank, "TUTTI_SIZE", s.size));
  TUTTI_RETURN_IF_ERROR(
      checkRankBelowSize("TUTTI_LOCAL_RANK", s.local_rank, "TUTTI_LOCAL_SIZE", s.local_size));
  TUTTI_RETURN_IF_ERROR(
      checkRankBelowSize("TUTTI_CROSS_RANK", s.cross_rank, "TUTTI_CROSS_SIZE", s.cross_size));
  const bool elastic = s.elastic_worker_id >= 0;
  if (elastic && s.backend != "tcp") {
    return Status::invalidArgument(
        "TUTTI_BACKEND=" + s.backend + ": elastic training (TUTTI_ELASTIC_WORKER_ID=" +
        std::to_string(s.elastic_worker_id) + ") needs the tcp backend; set TUTTI_BACKEND=tcp" +
        (under_mpirun ? " (auto chose mpi because the job runs under mpirun)" : ""));
  }
  // MPI authenticates its own job; the secret guards tcp connections (an
  // elastic worker always talks to the driver's store).
  if (slurm && s.size > 1 && s.secret.empty() && s.backend != "mpi") {
    return Status::invalidArgument(
        "TUTTI_SECRET is not set: a job started by srun needs a per-job secret shared by all "
        "ranks; export one before srun, which passes it to every task, e.g. export "
        "TUTTI_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')");
  }
  if ((s.size > 1 || elastic) && s.secret.empty() && s.backend != "mpi") {
    return Status::invalidArgument(
        "TUTTI_SECRET is not set: a job of more than one rank needs a per-job secret shared by all "
        "ranks (tuttirun sets it; when starting ranks by hand, export the same random string on "
        "every rank)");
  }
  return Status::ok();
}

}  // namespace

Status loadSettings(const EnvLookup& env, Settings* out) {
  Settings s;
  const EnvReader reader(env);
  // The backend first: under mpirun it decides where the placement comes from.
  TUTTI_RETURN_IF_ERROR(reader.text("TUTTI_BACKEND", &s.backend));
  const bool under_mpirun = env(kMpirunSizeVar).has_value();
  if (s.backend == "auto") s.backend = under_mpirun ? "mpi" : "tcp";
  TUTTI_RETURN_IF_ERROR(readPlacement(reader, env, under_mpirun, &s));
  TUTTI_RETURN_IF_ERROR(readKnobs(reader, &s));
  // A task of `srun`: Slurm's placement where TUTTI_* does not say otherwise.
  const bool slurm = underSlurmStep(env);
  if (slurm) TUTTI_RETURN_IF_ERROR(applySlurmPlacement(env, &s));
  TUTTI_RETURN_IF_ERROR(checkSettings(s, under_mpirun, slurm));
  for (const SettingSpec& spec : specTable()) {
    if (env(spec.name).has_value()) s.from_env.insert(spec.name);
  }
  *out = s;
  return Status::ok();
}

}  // namespace tutti

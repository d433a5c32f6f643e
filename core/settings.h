#pragma once

// The settings registry: every TUTTI_* environment variable is declared once
// here (name, type, accepted range, help) and read into Settings at init().
// Each default lives in one place, the initialiser of its Settings field
// below; the registry's table (and so `tuttirun --help`) prints it from there.
// `tuttirun` flags write the same variables and validate them with the same
// specs. A bad value is an error naming the variable and the range.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {

// kCompression: a compression spec, checked by core/compression_spec.h's parser.
enum class SettingType { kInt, kDouble, kString, kChoice, kCompression };

struct SettingSpec {
  const char* name;  // "TUTTI_FUSION_THRESHOLD_BYTES"
  SettingType type;
  std::string default_value;  // as it would appear in the environment; "" = unset
  double min = 0;             // kInt/kDouble: inclusive range
  double max = 0;
  const char* choices = "";  // kChoice: comma-separated accepted values
  const char* help = "";
};

// All declared settings, in documentation order.
const std::vector<SettingSpec>& settingSpecs();
const SettingSpec* findSettingSpec(const std::string& name);

// Checks one value against its spec. Error: "TUTTI_CYCLE_TIME_MS=-1: expected
// a number in [0, 10000] (milliseconds to wait before each negotiation round)".
Status validateSetting(const SettingSpec& spec, const std::string& value);

// Pipeline segment of ring collectives, in bytes: TUTTI_SEGMENT_BYTES's
// default, and what ops/algorithms/ring.h uses when passed 0.
constexpr int64_t kDefaultSegmentBytes = 256 * 1024;

// Typed values of every setting, read once at init(). The initialisers are
// the documented defaults (an empty environment gives exactly these, but for
// the placement fields that loadSettings derives and `backend`, which holds
// TUTTI_BACKEND=auto resolved).
struct Settings {
  // Placement (written by tuttirun; by hand when started without it).
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string rendezvous_addr = "127.0.0.1";
  int rendezvous_port = 29500;
  bool rank0_hosts_rendezvous = true;  // false when tuttirun serves it
  std::string secret;                  // per-job secret; never logged
  std::string hostname;  // address peers use to reach this rank ("" = rendezvous route)
  // Runtime knobs.
  int64_t fusion_threshold_bytes = 1 << 20;  // 0: no fusion
  double cycle_time_ms = 0;
  int64_t cache_capacity = 1024;
  double stall_check_time_seconds = 60;
  double stall_shutdown_time_seconds = 1800;  // 0: stalled ops only warn, never fail
  double timeout_seconds = 30;
  // The ordered lane (coordinator/ordered_lane.h): how long an op may wait
  // for a peer that moves no byte (0: no bound); the largest op (bytes of
  // all members' data) whose data travels with its signature; how long a
  // queued op waits for a waiting caller before the lane's thread runs it.
  double ordered_timeout_seconds = 1800;
  int64_t ordered_inline_bytes = 8 << 10;
  int64_t ordered_handoff_us = 50;
  int64_t ordered_spin_us = 200;
  std::string ordered_execution = "caller";  // caller (a waiting caller runs the op) or thread  //
                                             // how long a lane's wait polls before sleeping
  int64_t segment_bytes = kDefaultSegmentBytes;  // ring pipeline segment size
  // TUTTI_ALGORITHMS: overrides of the tcp backend's algorithm choice, parsed
  // and checked by ops/algorithm_table.h when the backend connects ("" = none).
  std::string algorithms;
  // TUTTI_HIERARCHICAL_ALLREDUCE (tcp backend, ops/algorithms/
  // allreduce_hierarchical.h): "auto" (the algorithm table decides), "1"
  // (whenever the placement allows), "0" (never).
  std::string hierarchical_allreduce = "auto";
  // TUTTI_HIERARCHICAL_ALLGATHER: the same for allgather
  // (ops/algorithms/allgather_hierarchical.h).
  std::string hierarchical_allgather = "auto";
  std::string shm = "auto";  // TUTTI_SHM: "auto" (same-host peers via shared memory) or "off"
  std::string timeline;      // TUTTI_TIMELINE: base path ("" = off), see coordinator/timeline.h
  bool timeline_mark_cycles = false;
  // "tcp", "mpi" or "nccl" (CUDA tensors through NCCL, the rest as tcp;
  // never chosen by auto): TUTTI_BACKEND=auto (the default) is resolved here, to
  // mpi when the job runs under Open MPI's mpirun (OMPI_COMM_WORLD_SIZE set),
  // else tcp. With mpi under mpirun, rank, size, local rank and local size
  // come from mpirun's OMPI_COMM_WORLD_* variables unless TUTTI_* sets them,
  // and no secret is needed.
  std::string backend = "tcp";
  std::string log_level = "warning";
  // Job-wide default compression of allreduce (canonical spec, see
  // core/compression_spec.h); OpOptions.compression overrides it per op.
  std::string compression = "none";
  // zstd level for the tcp backend's data over TCP (ops/tcp/zstd_link.h);
  // 0 = off.
  int compression_zstd_level = 0;
  // Elastic training (docs/elastic.md): TUTTI_ELASTIC_WORKER_ID >= 0 makes
  // init a join of the driver's membership generations (tcp backend only).
  int elastic_worker_id = -1;  // -1: not elastic
  double elastic_timeout_seconds = 600;
  // Not an environment variable: set by the elastic join on the copy it
  // creates the runtime with, the generation to rendezvous in (-1: none).
  int64_t elastic_generation = -1;
  // Autotune (docs/autotune.md, coordinator/parameter_manager.h): rank 0
  // tunes the fusion threshold, cycle time and response cache during the
  // first steps; TUTTI_AUTOTUNE_* are Horovod's HOROVOD_AUTOTUNE_* knobs.
  bool autotune = false;
  std::string autotune_log;  // CSV of every scored sample ("" = none)
  int autotune_warmup_samples = 3;
  int autotune_steps_per_sample = 10;
  int autotune_bayes_opt_max_samples = 20;
  double autotune_gaussian_process_noise = 0.8;
  // Names of the TUTTI_* variables the environment set: autotune keeps
  // those knobs fixed, as Horovod does with the HOROVOD_* ones.
  std::set<std::string> from_env;
};

// Looks up an environment variable; nullopt when unset. Tests pass their own.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup processEnv();
// An environment given as a map (a snapshot, or a test's): the lookup keeps a copy.
EnvLookup mapEnv(std::map<std::string, std::string> vars);

// Reads and validates every setting. The first bad value is the error.
Status loadSettings(const EnvLookup& env, Settings* out);

}  // namespace tutti

#pragma once

// tuttirun's job after its command line (not --mpi, see launcher/mpi_launch.h):
// plan it (hosts, placement, the ranks' shared environment, where remote
// ranks reach this machine), host its rendezvous server, start the ranks
// (launcher/job.h) or the elastic driver (launcher/elastic_job.h), and wait.
// planJob starts nothing, so tests can check a plan without processes.
//
// Threading: call from tuttirun's main thread, after blockJobSignals().

#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/cli.h"
#include "launcher/hosts.h"
#include "launcher/placement.h"
#include "launcher/rank_env.h"

namespace tutti {
namespace launcher {

struct JobPlan {
  std::vector<HostSlots> hosts;  // -H, --hostfile, the discovery script, an allocation or localhost
  int np = 0;                    // ranks of a fixed-size job (the slots when -np is not given)
  // Fixed-size jobs: one entry per rank. Elastic jobs: one per host (rank 0,
  // its slots as local_size); workers and generations come later.
  std::vector<RankPlacement> placement;
  std::vector<bool> remote;  // by placement entry: not this machine
  EnvMap launcher_env;       // tuttirun's environment as planned from
  JobEnv job;                // base environment (+ -x, + settings flags), cores, addresses
};

// Plans the job from the options and tuttirun's environment (a snapshot:
// currentEnvironment() in tuttirun). Returns kExitOk, or the exit code
// (kExitUsage: a bad host list, placement or -x / inherited setting;
// kExitStartFailed: the first host discovery failed, or no address for
// remote hosts) with *error saying what was wrong. Starts no process; runs
// the discovery script once when there is one.
int planJob(const LaunchOptions& options, const EnvMap& launcher_env, JobPlan* plan, Status* error);

// Plans and runs the job; returns tuttirun's exit code (launcher/cli.h).
// Errors are written to stderr as "tuttirun: <message>".
int runJob(const LaunchOptions& options);

}  // namespace launcher
}  // namespace tutti

#pragma once

// What to start for one rank (or elastic worker): the program itself on this
// machine, or the remote bootstrap (launcher/remote.h) through ssh or an rsh
// agent, with --output-filename files. Shared by the fixed-size job
// (launcher/run_job.h) and the elastic driver (launcher/elastic_job.h).

#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/job.h"
#include "launcher/rank_env.h"
#include "launcher/remote.h"

namespace tutti {
namespace launcher {

struct StartOptions {
  SshOptions ssh;
  std::vector<std::string> rsh_agent;  // the split --rsh-agent template; empty: ssh
  int grace_seconds = 5;               // of the remote bootstrap (TERM → KILL)
  std::string cwd;                     // working directory of every rank
  EnvMap launcher_env;                 // environment of ssh / the agent itself
  std::vector<std::string> command;    // the user's program and arguments
  std::string output_dir;              // --output-filename; "" : none
};

// Fills `out` for the process described by `placement` (its `rank` names the
// output directory `<output_dir>/<dir_prefix>.<rank>`) with environment `env`.
// `omp_local_size` > 0: a remote host without OMP_NUM_THREADS in `env` sets
// it to its cores / omp_local_size. kIoError if an output file cannot be
// created (nothing is left open then).
Status makeLaunch(const RankPlacement& placement, bool remote, const EnvMap& env,
                  int omp_local_size, const std::string& dir_prefix, const StartOptions& options,
                  RankLaunch* out);

// "via ssh", "via the rsh agent" or "" (local): for --verbose lines.
std::string launchVia(bool remote, const StartOptions& options);

}  // namespace launcher
}  // namespace tutti

#pragma once

// tuttirun --mpi: runs the job through Open MPI's mpirun instead of starting
// the ranks itself. The ranks then use the mpi backend, which takes rank,
// size and the local/cross placement from MPI (no rendezvous server, no
// secret: mpirun authenticates and wires its own job).
//
// The same placement as without --mpi: -np N and the hosts of -H or
// --hostfile as `-H host:slots,...` with `--map-by slot` (ranks fill the
// hosts in order). Inside an allocation mpirun reads itself (Slurm, or
// $OMPI_MCA_orte_default_hostfile) and without -H / --hostfile: no -H, and no
// -np unless given, so that mpirun places the ranks on the allocation. Every TUTTI_* setting
// (flags, -x and tuttirun's own environment, placement variables excepted) and every -x variable
// travels as `-x NAME=value`, plus TUTTI_BACKEND=mpi and, unless set, OMP_NUM_THREADS = max(1,
// cores / ranks per host). Also: --bind-to none,
// --tag-output (lines prefixed "[1,rank]<stdout>:"), --allow-run-as-root when
// run as root, and --oversubscribe with mpi_yield_when_idle when this machine
// runs more ranks than it has cores. --output-filename, --network-interface
// and -p/-i map onto mpirun's equivalents; --start-timeout has none (mpirun
// waits for its daemons itself).
//
// Job control is mpirun's: it forwards signals, kills the job when a rank
// fails, and its exit status is tuttirun's. tuttirun runs it as a child and
// passes its stderr through, to stop a mpirun that stays after every rank
// left without finishing MPI_Finalize (launcher/mpirun_watch.h).

#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/cli.h"
#include "launcher/hosts.h"
#include "launcher/rank_env.h"

namespace tutti {
namespace launcher {

struct MpirunContext {
  std::vector<HostSlots> hosts;  // parsed -H / --hostfile; empty: the allocation or localhost:np
  int np = 0;                    // 0: mpirun's default (the allocation's slots)
  EnvMap env;                    // the job's environment: tuttirun's, then -x, then settings flags
  std::vector<std::string> env_names;  // -x names, in order
  int local_cores = 1;                 // cores of this machine
  bool root = false;                   // tuttirun runs as root
};

// mpirun's argv for `options` (pure; tested). kInvalidArgument for a
// contradiction (--backend other than mpi).
Status mpirunCommand(const LaunchOptions& options, const MpirunContext& context,
                     std::vector<std::string>* argv);

// Builds the context from the process, then runs mpirun (found in PATH) and
// returns tuttirun's exit code: mpirun's (launcher/mpirun_watch.h), or
// kExitUsage, kExitStartFailed ("cannot run 'mpirun': ... not in PATH").
int runWithMpirun(const LaunchOptions& options);

}  // namespace launcher
}  // namespace tutti

#pragma once

// The hosts a resource manager gave the job, for tuttirun without -H,
// --hostfile or --host-discovery-script:
//   - $OMPI_MCA_orte_default_hostfile (Open MPI's default hostfile; Kubeflow's
//     MPI Operator points it at /etc/mpi/hostfile in the launcher pod),
//   - else a Slurm allocation (salloc, sbatch): SLURM_JOB_NODELIST with the
//     slots of SLURM_TASKS_PER_NODE, else SLURM_JOB_CPUS_PER_NODE.
// Pure functions of the given environment; thread-safe.

#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/hosts.h"
#include "launcher/rank_env.h"

namespace tutti {
namespace launcher {

struct Allocation {
  bool found = false;
  std::vector<HostSlots> hosts;
  std::string source;  // for messages: "the Slurm allocation (SLURM_JOB_NODELIST=n[1-2])"
};

// Reads the allocation from `env`. found=false (and OK) when there is none.
// Error (kInvalidArgument) names the variable or file that is malformed.
Status findAllocation(const EnvMap& env, Allocation* out);

// True when `env` describes an allocation that mpirun reads by itself (so
// tuttirun --mpi passes neither -H nor, without -np, -np).
bool mpirunHasAllocation(const EnvMap& env);

}  // namespace launcher
}  // namespace tutti

#pragma once

// Slurm's view of a job step, read from the variables srun sets in every task
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NODELIST,
// SLURM_STEP_TASKS_PER_NODE, SLURM_JOB_ID, SLURM_STEP_ID), and the parsers of
// Slurm's compressed forms. The syntax follows Slurm's documentation of
// hostlists ("gnode[10,20-25],other": ranges keep the zero padding of their
// lower bound, "n[01-03]" = n01,n02,n03) and of SLURM_TASKS_PER_NODE ("2(x3),1"
// = 2,2,2,1). Pure functions; thread-safe.

#include <string>
#include <vector>

#include "core/settings.h"
#include "core/status.h"

namespace tutti {

// Expands a Slurm hostlist: comma-separated names, each with any number of
// bracketed groups "[a,b-c,...]" of decimal numbers or ranges (a name with
// several groups expands to every combination, in order). Error
// (kInvalidArgument) names the list and what was wrong: unbalanced brackets,
// an empty name or group, a range whose end is below its start, more than
// 1048576 hosts.
Status expandHostlist(const std::string& list, std::vector<std::string>* hosts);

// Expands "2(x3),1" into {2, 2, 2, 1}: counts, each optionally repeated
// "(xN)" times. Error (kInvalidArgument) for anything else.
Status expandTasksPerNode(const std::string& text, std::vector<int>* counts);

// True when the environment is a task of a Slurm job step (SLURM_STEP_ID set)
// that tutti should take its placement from: no TUTTI_RANK, and not under
// Open MPI's mpirun (which has its own placement).
bool underSlurmStep(const EnvLookup& env);

// Fills rank, size, local rank/size, cross rank/size, the rendezvous address
// (the step's first host unless TUTTI_RENDEZVOUS_ADDR is set) and port
// (TUTTI_RENDEZVOUS_PORT, else slurmRendezvousPort) from srun's variables.
// The TUTTI_* variables that are set still win for every other field. Error
// (kInvalidArgument) names the Slurm variable that is missing or malformed.
Status applySlurmPlacement(const EnvLookup& env, Settings* s);

// The rendezvous port of a step when TUTTI_RENDEZVOUS_PORT is unset:
// 20000 + (job_id * 8 + step_id) mod 12000, in [20000, 31999] (below Linux's
// ephemeral range), the same in every task of the step.
int slurmRendezvousPort(long long job_id, long long step_id);

}  // namespace tutti

#pragma once

// The environment of each rank: tuttirun's own environment (for remote
// ranks, without the variables that describe this machine or session), the
// -x variables, the runtime settings from flags, and the placement variables.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "launcher/placement.h"

namespace tutti {
namespace launcher {

using EnvMap = std::map<std::string, std::string>;

// What every rank of the job shares.
struct JobEnv {
  EnvMap base;              // tuttirun's environment (+ -x, + settings flags)
  std::string secret;       // TUTTI_SECRET
  int rendezvous_port = 0;  // TUTTI_RENDEZVOUS_PORT
  std::string local_rendezvous_addr = "127.0.0.1";  // for ranks on this machine
  std::string remote_rendezvous_addr;               // for ranks on other hosts
  std::string local_hostname;                       // TUTTI_HOSTNAME of local ranks ("" = not set)
  // Remote ranks get TUTTI_HOSTNAME = their host's name. False with
  // --rsh-agent: the name may mean nothing to the network (a namespace, a
  // pod); the rank advertises its route to the rendezvous server instead.
  bool remote_hostname = true;
  int cores = 1;  // cores of this machine (OMP_NUM_THREADS of local ranks)
};

// The process environment as a map.
EnvMap currentEnvironment();

// Applies -x flags to `env`: "VAR=value" sets VAR; "VAR" requires VAR to be
// set in `from` (tuttirun's environment) and copies it.
Status applyEnvFlags(const std::vector<std::string>& flags, const EnvMap& from, EnvMap* env);

// Checks every TUTTI_* variable already in `env` against the settings
// registry, so that a bad exported value fails before the job starts.
Status validateInheritedSettings(const EnvMap& env);

// TUTTI_RANK, TUTTI_SECRET, TUTTI_ELASTIC_WORKER_ID, ...: written per rank
// (or per job) by tuttirun, never inherited from its environment.
bool isPlacementVariable(const std::string& name);

// A random per-job secret: 32 bytes from libsodium, as 64 hex digits.
Status generateSecret(std::string* secret);

// The environment of one rank. For a remote rank, OMP_NUM_THREADS is left to
// the remote host (it knows its cores; see remoteScript) unless set.
EnvMap rankEnvironment(const RankPlacement& rank, int world_size, bool remote, const JobEnv& job);

// The environment of one elastic worker (docs/elastic.md): as
// rankEnvironment, but instead of TUTTI_RANK, _SIZE, _LOCAL_*, _CROSS_* (the
// worker reads them from its generation's members) TUTTI_ELASTIC_WORKER_ID
// and TUTTI_ELASTIC_TIMEOUT_SECONDS. `host_slots` sizes OMP_NUM_THREADS of a
// local worker.
EnvMap workerEnvironment(int worker_id, const std::string& elastic_timeout_seconds,
                         const std::string& host, int host_slots, bool remote, const JobEnv& job);

// Environment variables not carried to remote hosts: they describe this
// machine or this login session.
bool isHostSpecificVariable(const std::string& name);

// True for names a POSIX shell can export ([A-Za-z_][A-Za-z0-9_]*).
bool isExportableName(const std::string& name);
// The warning tuttirun prints when ranks run on other hosts and `base` holds
// names a shell cannot export (they are dropped there); "" when none.
std::string unexportableWarning(const EnvMap& base);

// "KEY=value" strings for execve.
std::vector<std::string> envStrings(const EnvMap& env);

}  // namespace launcher
}  // namespace tutti

#pragma once

// tuttirun's command line (CLI11): what the user asked for, checked before
// anything starts. Flags that map onto runtime settings are validated with
// the settings registry (core/settings.h) and become TUTTI_* variables.

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "launcher/rank_env.h"

namespace tutti {
namespace launcher {

// Exit codes of tuttirun (also listed in --help).
constexpr int kExitOk = 0;            // every rank exited with code 0
constexpr int kExitRankFailed = 1;    // a rank exited non-zero or was killed by a signal
constexpr int kExitUsage = 2;         // bad command line or flag value
constexpr int kExitStartFailed = 3;   // the job could not start (spawn, ssh, rendezvous server)
constexpr int kExitStartTimeout = 4;  // ranks did not reach the rendezvous in time
// 128+N: tuttirun received signal N (130 for SIGINT, 143 for SIGTERM).

struct LaunchOptions {
  int np = 0;                          // 0: the total slots of -H / --hostfile
  std::string hosts;                   // -H
  std::string hostfile;                // --hostfile
  std::vector<std::string> env_flags;  // -x VAR or -x VAR=value, in order
  double start_timeout_seconds = 60;   // 0: no start timeout
  double grace_seconds = 5;            // SIGTERM → SIGKILL
  std::string output_dir;              // --output-filename
  bool verbose = false;
  int ssh_port = 0;               // 0: ssh's default
  std::string ssh_identity;       // -i
  std::string network_interface;  // --network-interface
  bool mpi = false;
  bool horovod_compat = false;               // --horovod-compat (launcher/horovod_compat.h)
  std::string rsh_agent;                     // --rsh-agent template ("" : ssh)
  std::vector<std::string> rsh_agent_words;  // rsh_agent split into words
  // Elastic mode (docs/elastic.md): any of --min-np, --max-np,
  // --host-discovery-script. np 0 there: --max-np, else the slots available.
  int min_np = 0;                        // 0: not given (= np)
  int max_np = 0;                        // 0: not given (no limit)
  std::string discovery_script;          // --host-discovery-script
  int slots_per_host = 1;                // slots of a bare host name from the script
  double elastic_timeout_seconds = 600;  // below --min-np this long: the job fails
  int reset_limit = -1;                  // -1: no limit
  double cooldown_min_seconds = 0;       // --blacklist-cooldown-range; 0: blacklisted for good
  double cooldown_max_seconds = 0;
  bool elastic() const { return min_np > 0 || max_np > 0 || !discovery_script.empty(); }
  std::vector<std::string> command;  // the program and its arguments
  // TUTTI_* variables from flags, validated, in the order of the flags.
  std::vector<std::pair<std::string, std::string>> settings;
};

struct CliOutcome {
  bool run = false;   // true: start the job in `options`
  int exit_code = 0;  // when !run
  std::string out;    // text for stdout (--help, --version, --check-build)
  std::string err;    // text for stderr (errors)
};

// Parses argv[1..] (args excludes the program name) against a snapshot of
// tuttirun's environment (currentEnvironment() in tuttirun; tests pass their
// own): `env` is read for TUTTI_BACKEND (the mpi backend needs --mpi) and for
// an allocation that gives the number of ranks without -np. Reads nothing
// else; never throws.
CliOutcome parseCommandLine(const std::vector<std::string>& args, const EnvMap& env,
                            LaunchOptions* options);

// Maps one settings flag ("--fusion-threshold-mb") and its value onto a
// TUTTI_* variable, converting units, and validates it against the registry.
// Error: "--cycle-time-ms -1: expected a number in [0, 10000] (...)".
Status settingFromFlag(const std::string& flag, const std::string& value,
                       std::pair<std::string, std::string>* setting);
// The flags settingFromFlag knows, in --help order.
std::vector<std::string> settingFlags();

// A number as short as it can be written: 600, 2.5.
std::string formatNumber(double v);

// What this build offers (tcp always; mpi, cuda, nccl as built).
std::string checkBuildText();
std::string versionText();

}  // namespace launcher
}  // namespace tutti

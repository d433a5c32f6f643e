#include "launcher/cli_checks.h"

#include <cctype>
#include <cmath>

#include "launcher/allocation.h"
#include "launcher/remote.h"
#include "tutti/config.h"

namespace tutti {
namespace launcher {
namespace {

// The elastic worker counts (--min-np, --max-np, -np, --slots-per-host); "" when fine.
std::string checkElasticCounts(const CLI::App& app, const LaunchOptions& o) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  const std::string n = " (an integer in [1, 1048576])";
  if (given("--min-np") && (o.min_np < 1 || o.min_np > (1 << 20))) {
    return "--min-np " + std::to_string(o.min_np) + ": expected at least 1 worker" + n;
  }
  if (given("--max-np") && (o.max_np < 1 || o.max_np > (1 << 20))) {
    return "--max-np " + std::to_string(o.max_np) + ": expected at least 1 worker" + n;
  }
  if (o.min_np > 0 && o.max_np > 0 && o.min_np > o.max_np) {
    return "--min-np " + std::to_string(o.min_np) + " exceeds --max-np " +
           std::to_string(o.max_np) + ": expected min-np <= max-np";
  }
  if (o.np > 0 && o.min_np > o.np) {
    return "--min-np " + std::to_string(o.min_np) + " exceeds -np " + std::to_string(o.np) +
           ": expected min-np <= np <= max-np";
  }
  if (o.np > 0 && o.max_np > 0 && o.np > o.max_np) {
    return "-np " + std::to_string(o.np) + " exceeds --max-np " + std::to_string(o.max_np) +
           ": expected min-np <= np <= max-np";
  }
  if (given("--slots-per-host") && (o.slots_per_host < 1 || o.slots_per_host > (1 << 20))) {
    return "--slots-per-host " + std::to_string(o.slots_per_host) +
           ": expected an integer in [1, 1048576]";
  }
  if (given("--slots-per-host") && o.discovery_script.empty()) {
    return "--slots-per-host applies to the hosts of --host-discovery-script; use -H host:slots";
  }
  return "";
}

}  // namespace

// The elastic flags, and how they combine with the rest; "" when fine.
std::string checkElasticOptions(const CLI::App& app, const LaunchOptions& o) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  std::string counts = checkElasticCounts(app, o);
  if (!counts.empty()) return counts;
  if (!std::isfinite(o.elastic_timeout_seconds) || o.elastic_timeout_seconds <= 0 ||
      o.elastic_timeout_seconds > 1e7) {
    return "--elastic-timeout " + formatNumber(o.elastic_timeout_seconds) +
           ": expected a number of seconds in (0, 10000000]";
  }
  if (given("--reset-limit") && o.reset_limit < 0) {
    return "--reset-limit " + std::to_string(o.reset_limit) +
           ": expected an integer >= 0 (0: no new generation)";
  }
  if (given("--blacklist-cooldown-range")) {
    double lo = o.cooldown_min_seconds, hi = o.cooldown_max_seconds;
    if (!std::isfinite(lo) || !std::isfinite(hi) || lo <= 0 || hi < lo || hi > 1e7) {
      return "--blacklist-cooldown-range " + formatNumber(lo) + " " + formatNumber(hi) +
             ": expected MIN MAX seconds with 0 < MIN <= MAX <= 10000000";
    }
  }
  if (!o.discovery_script.empty() && (!o.hosts.empty() || !o.hostfile.empty())) {
    return "--host-discovery-script and " + std::string(o.hosts.empty() ? "--hostfile" : "-H") +
           " exclude each other (the script gives the hosts)";
  }
  if (o.elastic() && given("--start-timeout")) {
    return "--start-timeout applies to fixed-size jobs: elastic workers wait for each "
           "generation up to --elastic-timeout instead";
  }
  if (o.elastic() && o.mpi) {
    return "--mpi runs a fixed-size job; elastic flags (--min-np, --max-np, "
           "--host-discovery-script) need the tcp backend without --mpi";
  }
  if (!o.elastic()) {
    for (const char* flag :
         {"--elastic-timeout", "--reset-limit", "--blacklist-cooldown-range", "--slots-per-host"}) {
      if (given(flag)) {
        return std::string(flag) +
               " applies to elastic jobs only: add --min-np, --max-np or "
               "--host-discovery-script";
      }
    }
  }
  return "";
}

// --mpi against this build, and the mpi backend (from --backend, else
// TUTTI_BACKEND in `env`) against --mpi.
std::string checkMpiOptions(const LaunchOptions& o, const EnvMap& env) {
  if (o.mpi && !TUTTI_BUILT_MPI) {
    return "--mpi: this build has no MPI backend (Open MPI was not found at configure time: "
           "install libopenmpi-dev and reconfigure), so jobs cannot run through mpirun; run "
           "without --mpi to use the tcp backend (see tuttirun --check-build)";
  }
  // The mpi backend takes its ranks from mpirun: without --mpi every rank
  // would find itself alone in MPI_COMM_WORLD.
  std::string backend;
  for (const auto& [name, value] : o.settings) {
    if (name == "TUTTI_BACKEND") backend = value;
  }
  const auto env_backend = env.find("TUTTI_BACKEND");
  const bool from_env = backend.empty() && env_backend != env.end();
  if (from_env) backend = env_backend->second;
  if (backend == "mpi" && !o.mpi) {
    return std::string(from_env ? "TUTTI_BACKEND=mpi" : "--backend mpi") +
           ": the mpi backend runs under Open MPI's mpirun; add --mpi "
           "(tuttirun --mpi -np N ...), or use --backend tcp";
  }
  return "";
}

// -np, -H / --hostfile (or an allocation in `env`), --start-timeout, -p, -x.
std::string checkJobOptions(const CLI::App& app, const LaunchOptions& o, const EnvMap& env) {
  if (app.count("--np") > 0 && o.np < 1) {
    return "-np " + std::to_string(o.np) + ": expected an integer in [1, 1048576]";
  }
  if (!o.hosts.empty() && !o.hostfile.empty()) return "-H and --hostfile exclude each other";
  if (o.np == 0 && o.hosts.empty() && o.hostfile.empty() && o.max_np == 0 &&
      o.discovery_script.empty() && !mpirunHasAllocation(env)) {
    return "-np is required (or -H / --hostfile, or an allocation: Slurm's salloc / sbatch, "
           "$OMPI_MCA_orte_default_hostfile; their slots then give the number of ranks)";
  }
  if (!std::isfinite(o.start_timeout_seconds) || o.start_timeout_seconds < 0 ||
      o.start_timeout_seconds > 1e7) {
    return "--start-timeout " + formatNumber(o.start_timeout_seconds) +
           ": expected a number of seconds in [0, 10000000] (0: no limit)";
  }
  if (app.count("--ssh-port") > 0 && (o.ssh_port < 1 || o.ssh_port > 65535)) {
    return "-p " + std::to_string(o.ssh_port) + ": expected a port in [1, 65535]";
  }
  for (const auto& x : o.env_flags) {
    std::string name = x.substr(0, x.find('='));
    bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) valid = valid && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!valid) return "-x " + x + ": expected VAR or VAR=value with VAR a variable name";
  }
  return "";
}

// --rsh-agent split into words, and what it excludes.
std::string checkRshAgent(const CLI::App& app, LaunchOptions* options) {
  LaunchOptions& o = *options;
  if (app.count("--rsh-agent") == 0) return "";
  Status st = splitShellWords(o.rsh_agent, &o.rsh_agent_words);
  if (!st.isOk() || o.rsh_agent_words.empty()) {
    return "--rsh-agent '" + o.rsh_agent +
           "': " + (st.isOk() ? std::string("empty command") : st.message()) +
           "; expected a command such as 'ip netns exec {host}'";
  }
  if (o.mpi) return "--rsh-agent and --mpi exclude each other (mpirun starts the ranks)";
  if (app.count("--ssh-port") > 0 || app.count("--ssh-identity-file") > 0) {
    return "--rsh-agent replaces ssh: -p / -i do not apply";
  }
  return "";
}

}  // namespace launcher
}  // namespace tutti

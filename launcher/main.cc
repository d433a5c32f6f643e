// tuttirun: parses the command line, places the ranks, hosts the job's
// rendezvous server and runs the job (launcher/job.h). The only place of the
// launcher where exceptions may surface (CLI11, std::bad_alloc).

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <set>

#include "core/logging.h"
#include "launcher/allocation.h"
#include "launcher/cli.h"
#include "launcher/discovery.h"
#include "launcher/elastic_job.h"
#include "launcher/hosts.h"
#include "launcher/job.h"
#include "launcher/launch.h"
#include "launcher/mpi_launch.h"
#include "launcher/network.h"
#include "launcher/placement.h"
#include "launcher/rank_env.h"
#include "launcher/remote.h"
#include "launcher/spawn.h"
#include "ops/tcp/rendezvous_server.h"

namespace tutti {
namespace launcher {
namespace {

std::set<int> arrivedRanks(const RendezvousServer& server) {
  std::set<int> out;
  for (const auto& key : server.keys("rank/")) {
    // "rank/<r>/generation" (ops/tcp/generation_store.h): set when rank r
    // checks in at the rendezvous.
    size_t slash = key.find('/', 5);
    if (slash == std::string::npos || key.compare(slash, std::string::npos, "/generation") != 0) {
      continue;
    }
    char* end = nullptr;
    long r = std::strtol(key.c_str() + 5, &end, 10);
    if (end == key.c_str() + slash) out.insert(static_cast<int>(r));
  }
  return out;
}

int fail(int code, const Status& st) {
  std::string line = "tuttirun: " + st.message() + "\n";
  writeAll(2, line.data(), line.size());
  return code;
}

int run(const LaunchOptions& o) {
  if (o.verbose) setLogLevel(LogLevel::kInfo);
  for (const auto& [name, value] : o.settings) {
    LogLevel level;
    if (name == "TUTTI_LOG_LEVEL" && parseLogLevel(value, &level)) setLogLevel(level);
  }

  // Hosts and placement.
  std::vector<HostSlots> hosts;
  Status st;
  if (!o.hosts.empty()) {
    st = parseHostList(o.hosts, &hosts);
  } else if (!o.hostfile.empty()) {
    st = readHostfile(o.hostfile, &hosts);
  } else if (!o.discovery_script.empty()) {
    // Its first run must work: there is no last good list to fall back on.
    st = runDiscoveryScript(o.discovery_script, o.slots_per_host, 30, &hosts);
    if (!st.isOk()) {
      return fail(kExitStartFailed,
                  Status(st.code(), "elastic: the first host discovery failed: " + st.message()));
    }
  } else {
    Allocation allocation;
    st = findAllocation(currentEnvironment(), &allocation);
    hosts = {{"localhost", std::max(o.np, o.max_np)}};
    if (st.isOk() && allocation.found) {
      hosts = allocation.hosts;
      if (o.verbose) {
        std::string line = "tuttirun: hosts from " + allocation.source + "\n";
        writeAll(2, line.data(), line.size());
      }
    }
  }
  if (!st.isOk()) return fail(kExitUsage, st);
  int np = o.np > 0 ? o.np : totalSlots(hosts);
  std::vector<RankPlacement> placement;
  if (!o.elastic()) {
    st = assignRanks(hosts, np, &placement);
    if (!st.isOk()) return fail(kExitUsage, st);
  } else {
    // Workers and generations come later; only the hosts matter here.
    for (const auto& h : hosts) placement.push_back({0, h.host, 0, 0, h.slots, 0, 1});
  }

  // Environment shared by every rank.
  JobEnv job;
  EnvMap launcher_env = currentEnvironment();
  job.base = launcher_env;
  st = validateInheritedSettings(job.base);
  if (st.isOk()) st = applyEnvFlags(o.env_flags, launcher_env, &job.base);
  if (st.isOk()) st = validateInheritedSettings(job.base);
  if (!st.isOk()) return fail(kExitUsage, st);
  for (const auto& [name, value] : o.settings) job.base[name] = value;
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  job.cores = cores > 0 ? static_cast<int>(cores) : 1;

  // Where remote ranks reach this machine: loopback hosts (127.0.0.x) reach
  // it at 127.0.0.1; real hosts at --network-interface's address or the
  // first non-loopback one, which local ranks then advertise too.
  std::string interface_addr;
  if (!o.network_interface.empty()) {
    st = interfaceAddress(o.network_interface, &interface_addr);
    if (!st.isOk()) return fail(kExitUsage, st);
  }
  bool any_remote = false, remote_beyond_loopback = false;
  std::vector<bool> remote(placement.size());
  for (size_t i = 0; i < placement.size(); ++i) {
    remote[i] = !isLocalHost(placement[i].host);
    any_remote = any_remote || remote[i];
    remote_beyond_loopback =
        remote_beyond_loopback || (remote[i] && !isLoopbackHost(placement[i].host));
  }
  if (any_remote || !o.discovery_script.empty()) {
    const std::string dropped = unexportableWarning(job.base);
    if (!dropped.empty()) std::cerr << "tuttirun: warning: " << dropped << std::endl;
  }
  job.remote_rendezvous_addr = "127.0.0.1";
  // A discovery script may add real hosts later: take the address now if
  // there is one.
  if (remote_beyond_loopback || !o.discovery_script.empty()) {
    std::string addr = interface_addr;
    Status found = addr.empty() ? firstNonLoopbackAddress(&addr) : Status::ok();
    if (!found.isOk() && remote_beyond_loopback) return fail(kExitStartFailed, found);
    if (found.isOk()) {
      job.remote_rendezvous_addr = addr;
      job.local_hostname = addr;
    }
  }

  char cwd_buf[PATH_MAX];
  if (::getcwd(cwd_buf, sizeof(cwd_buf)) == nullptr) {
    return fail(kExitStartFailed, Status::ioError(std::string("getcwd: ") + std::strerror(errno)));
  }
  const std::string cwd = cwd_buf;

  // The rendezvous server and the secret.
  st = generateSecret(&job.secret);
  if (!st.isOk()) return fail(kExitStartFailed, st);
  std::unique_ptr<RendezvousServer> server;
  st = RendezvousServer::start("0.0.0.0", 0, job.secret, &server);
  if (!st.isOk()) return fail(kExitStartFailed, st);
  job.rendezvous_port = server->port();
  StartOptions start;
  start.ssh = {o.ssh_port, o.ssh_identity};
  start.rsh_agent = o.rsh_agent_words;
  start.grace_seconds = static_cast<int>(o.grace_seconds + 0.5);
  start.cwd = cwd;
  start.launcher_env = launcher_env;
  start.command = o.command;
  start.output_dir = o.output_dir;
  job.remote_hostname = o.rsh_agent_words.empty();
  if (o.elastic()) {
    if (o.verbose) {
      std::string line = "tuttirun: rendezvous server on port " +
                         std::to_string(job.rendezvous_port) + "; elastic job on " +
                         std::to_string(hosts.size()) + " host(s)\n";
      writeAll(2, line.data(), line.size());
    }
    int code = runElasticJob(o, job, start, hosts, *server);
    server->stop();
    return code;
  }
  if (o.verbose) {
    std::string line = "tuttirun: rendezvous server on port " +
                       std::to_string(job.rendezvous_port) + "; " + std::to_string(np) +
                       " ranks on " + std::to_string(placement.back().cross_size) + " host(s)\n";
    writeAll(2, line.data(), line.size());
  }

  // What to start for each rank.
  std::vector<RankLaunch> launches;
  for (size_t i = 0; i < placement.size(); ++i) {
    RankLaunch l;
    EnvMap env = rankEnvironment(placement[i], np, remote[i], job);
    st = makeLaunch(placement[i], remote[i], env, placement[i].local_size, "rank", start, &l);
    if (!st.isOk()) {
      for (auto& done : launches) {
        ::close(done.stdout_file);
        ::close(done.stderr_file);
      }
      return fail(kExitStartFailed, st);
    }
    l.rsh_agent = remote[i] && !start.rsh_agent.empty();
    if (o.verbose) {
      std::string line =
          "tuttirun: rank " + std::to_string(placement[i].rank) + " -> " + placement[i].host +
          " (local rank " + std::to_string(placement[i].local_rank) + "/" +
          std::to_string(placement[i].local_size) + ", cross rank " +
          std::to_string(placement[i].cross_rank) + "/" + std::to_string(placement[i].cross_size) +
          ")" + (remote[i] ? " " + launchVia(true, start) : "") + "\n";
      writeAll(2, line.data(), line.size());
    }
    launches.push_back(std::move(l));
  }

  JobConfig config;
  config.start_timeout_seconds = o.start_timeout_seconds;
  config.grace_seconds = o.grace_seconds;
  config.verbose = o.verbose;
  RendezvousServer* srv = server.get();
  config.arrived_ranks = [srv] { return arrivedRanks(*srv); };
  int code;
  {
    Job job_control(config);
    st = job_control.start(std::move(launches));
    if (!st.isOk()) return fail(kExitStartFailed, st);
    code = job_control.wait();
  }
  server->stop();
  return code;
}

}  // namespace
}  // namespace launcher
}  // namespace tutti

int main(int argc, char** argv) {
  using namespace tutti::launcher;
  // Before any thread exists: the event loop takes these through a signalfd.
  blockJobSignals();
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    LaunchOptions options;
    CliOutcome outcome = parseCommandLine(args, &options);
    if (!outcome.run) {
      std::cout << outcome.out << std::flush;
      std::cerr << outcome.err << std::flush;
      return outcome.exit_code;
    }
    if (options.mpi) return runWithMpirun(options);
    return run(options);
  } catch (const std::exception& e) {
    std::cerr << "tuttirun: internal error: " << e.what() << std::endl;
    return kExitStartFailed;
  }
}

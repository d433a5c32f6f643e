// tuttirun: parses the command line, places the ranks, hosts the job's
// rendezvous server and runs the job (launcher/job.h). The only place of the
// launcher where exceptions may surface (CLI11, std::bad_alloc).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <set>

#include "core/logging.h"
#include "launcher/cli.h"
#include "launcher/hosts.h"
#include "launcher/job.h"
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

// mkdir -p
Status makeDirs(const std::string& path) {
  std::string sofar;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    sofar = path.substr(0, pos);
    if (sofar.empty()) continue;
    if (::mkdir(sofar.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::ioError("--output-filename: cannot create " + sofar + ": " +
                             std::strerror(errno));
    }
  }
  return Status::ok();
}

Status openOutputFile(const std::string& path, int* fd) {
  *fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (*fd < 0) {
    return Status::ioError("--output-filename: cannot open " + path + ": " + std::strerror(errno));
  }
  return Status::ok();
}

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
  } else {
    hosts = {{"localhost", o.np}};
  }
  if (!st.isOk()) return fail(kExitUsage, st);
  int np = o.np > 0 ? o.np : totalSlots(hosts);
  std::vector<RankPlacement> placement;
  st = assignRanks(hosts, np, &placement);
  if (!st.isOk()) return fail(kExitUsage, st);

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
  job.remote_rendezvous_addr = "127.0.0.1";
  if (remote_beyond_loopback) {
    job.remote_rendezvous_addr = interface_addr;
    if (interface_addr.empty()) {
      st = firstNonLoopbackAddress(&job.remote_rendezvous_addr);
      if (!st.isOk()) return fail(kExitStartFailed, st);
    }
    job.local_hostname = job.remote_rendezvous_addr;
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
  if (o.verbose) {
    std::string line = "tuttirun: rendezvous server on port " +
                       std::to_string(job.rendezvous_port) + "; " + std::to_string(np) +
                       " ranks on " + std::to_string(placement.back().cross_size) + " host(s)\n";
    writeAll(2, line.data(), line.size());
  }

  // What to start for each rank.
  std::vector<RankLaunch> launches;
  SshOptions ssh{o.ssh_port, o.ssh_identity};
  int grace = static_cast<int>(o.grace_seconds + 0.5);
  for (size_t i = 0; i < placement.size(); ++i) {
    RankLaunch l;
    l.placement = placement[i];
    l.remote = remote[i];
    EnvMap env = rankEnvironment(placement[i], np, remote[i], job);
    if (remote[i]) {
      l.request.argv = sshCommand(placement[i].host, ssh, grace);
      l.request.env = envStrings(launcher_env);
      l.request.stdin_pipe = true;
      l.stdin_script = remoteScript(env, cwd, o.command, placement[i].local_size);
    } else {
      l.request.argv = o.command;
      l.request.env = envStrings(env);
    }
    if (!o.output_dir.empty()) {
      std::string dir = o.output_dir + "/rank." + std::to_string(placement[i].rank);
      st = makeDirs(dir);
      if (st.isOk()) st = openOutputFile(dir + "/stdout", &l.stdout_file);
      if (st.isOk()) st = openOutputFile(dir + "/stderr", &l.stderr_file);
      if (!st.isOk()) {
        for (auto& done : launches) {
          ::close(done.stdout_file);
          ::close(done.stderr_file);
        }
        if (l.stdout_file >= 0) ::close(l.stdout_file);
        return fail(kExitStartFailed, st);
      }
    }
    if (o.verbose) {
      std::string line =
          "tuttirun: rank " + std::to_string(placement[i].rank) + " -> " + placement[i].host +
          " (local rank " + std::to_string(placement[i].local_rank) + "/" +
          std::to_string(placement[i].local_size) + ", cross rank " +
          std::to_string(placement[i].cross_rank) + "/" + std::to_string(placement[i].cross_size) +
          ")" + (remote[i] ? " via ssh" : "") + "\n";
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

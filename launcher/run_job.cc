#include "launcher/run_job.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>

#include "core/logging.h"
#include "launcher/allocation.h"
#include "launcher/discovery.h"
#include "launcher/elastic_job.h"
#include "launcher/job.h"
#include "launcher/launch.h"
#include "launcher/network.h"
#include "launcher/output.h"
#include "rendezvous/generation_store.h"
#include "rendezvous/rendezvous_server.h"

namespace tutti {
namespace launcher {
namespace {

std::set<int> arrivedRanks(const RendezvousServer& server) {
  std::set<int> out;
  // A rank's generation key is set when it checks in at the rendezvous.
  for (const auto& key : server.keys(generationKeyPrefix())) {
    int rank = -1;
    if (parseGenerationKey(key, &rank)) out.insert(rank);
  }
  return out;
}

void say(const std::string& text) {
  std::string line = "tuttirun: " + text + "\n";
  writeAll(2, line.data(), line.size());
}

int fail(int code, const Status& st) {
  say(st.message());
  return code;
}

// The returned code with *error when `st` failed; kExitOk otherwise.
int failWith(int code, const Status& st, Status* error) {
  if (st.isOk()) return kExitOk;
  *error = st;
  return code;
}

void applyLogLevel(const LaunchOptions& o) {
  if (o.verbose) setLogLevel(LogLevel::kInfo);
  for (const auto& [name, value] : o.settings) {
    LogLevel level;
    if (name == "TUTTI_LOG_LEVEL" && parseLogLevel(value, &level)) setLogLevel(level);
  }
}

// -H, --hostfile, the discovery script's first run, an allocation in `env`,
// else localhost with the ranks asked for.
int resolveHosts(const LaunchOptions& o, const EnvMap& env, std::vector<HostSlots>* hosts,
                 Status* error) {
  if (!o.hosts.empty()) return failWith(kExitUsage, parseHostList(o.hosts, hosts), error);
  if (!o.hostfile.empty()) return failWith(kExitUsage, readHostfile(o.hostfile, hosts), error);
  if (!o.discovery_script.empty()) {
    // Its first run must work: there is no last good list to fall back on.
    Status st = runDiscoveryScript(o.discovery_script, o.slots_per_host, 30, hosts);
    if (st.isOk()) return kExitOk;
    return failWith(kExitStartFailed,
                    Status(st.code(), "elastic: the first host discovery failed: " + st.message()),
                    error);
  }
  Allocation allocation;
  Status st = findAllocation(env, &allocation);
  *hosts = {{"localhost", std::max(o.np, o.max_np)}};
  if (st.isOk() && allocation.found) {
    *hosts = allocation.hosts;
    if (o.verbose) say("hosts from " + allocation.source);
  }
  return failWith(kExitUsage, st, error);
}

// Placement, and which entries are remote.
int placeRanks(const LaunchOptions& o, JobPlan* plan, Status* error) {
  plan->np = o.np > 0 ? o.np : totalSlots(plan->hosts);
  if (!o.elastic()) {
    Status st = assignRanks(plan->hosts, plan->np, &plan->placement);
    if (!st.isOk()) return failWith(kExitUsage, st, error);
  } else {
    // Workers and generations come later; only the hosts matter here.
    for (const auto& h : plan->hosts) plan->placement.push_back({0, h.host, 0, 0, h.slots, 0, 1});
  }
  plan->remote.assign(plan->placement.size(), false);
  for (size_t i = 0; i < plan->placement.size(); ++i) {
    plan->remote[i] = !isLocalHost(plan->placement[i].host);
  }
  return kExitOk;
}

// The environment every rank shares: tuttirun's, checked, with -x and the
// settings flags applied.
int buildJobEnv(const LaunchOptions& o, JobPlan* plan, Status* error) {
  JobEnv& job = plan->job;
  job.base = plan->launcher_env;
  Status st = validateInheritedSettings(job.base);
  if (st.isOk()) st = applyEnvFlags(o.env_flags, plan->launcher_env, &job.base);
  if (st.isOk()) st = validateInheritedSettings(job.base);
  if (!st.isOk()) return failWith(kExitUsage, st, error);
  for (const auto& [name, value] : o.settings) job.base[name] = value;
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  job.cores = cores > 0 ? static_cast<int>(cores) : 1;
  return kExitOk;
}

// Where remote ranks reach this machine: loopback hosts (127.0.0.x) reach
// it at 127.0.0.1; real hosts at --network-interface's address or the
// first non-loopback one, which local ranks then advertise too.
int chooseRendezvousAddress(const LaunchOptions& o, JobPlan* plan, Status* error) {
  std::string interface_addr;
  if (!o.network_interface.empty()) {
    Status st = interfaceAddress(o.network_interface, &interface_addr);
    if (!st.isOk()) return failWith(kExitUsage, st, error);
  }
  bool any_remote = false, remote_beyond_loopback = false;
  for (size_t i = 0; i < plan->placement.size(); ++i) {
    any_remote = any_remote || plan->remote[i];
    remote_beyond_loopback =
        remote_beyond_loopback || (plan->remote[i] && !isLoopbackHost(plan->placement[i].host));
  }
  if (any_remote || !o.discovery_script.empty()) {
    const std::string dropped = unexportableWarning(plan->job.base);
    if (!dropped.empty()) std::cerr << "tuttirun: warning: " << dropped << std::endl;
  }
  plan->job.remote_rendezvous_addr = "127.0.0.1";
  // A discovery script may add real hosts later: take the address now if
  // there is one.
  if (remote_beyond_loopback || !o.discovery_script.empty()) {
    std::string addr = interface_addr;
    Status found = addr.empty() ? firstNonLoopbackAddress(&addr) : Status::ok();
    if (!found.isOk() && remote_beyond_loopback) return failWith(kExitStartFailed, found, error);
    if (found.isOk()) {
      plan->job.remote_rendezvous_addr = addr;
      plan->job.local_hostname = addr;
    }
  }
  return kExitOk;
}

// What to start for each rank of a fixed-size job.
Status makeLaunches(const LaunchOptions& o, const JobPlan& plan, const StartOptions& start,
                    std::vector<RankLaunch>* launches) {
  for (size_t i = 0; i < plan.placement.size(); ++i) {
    const RankPlacement& p = plan.placement[i];
    const bool remote = plan.remote[i];
    RankLaunch l;
    EnvMap env = rankEnvironment(p, plan.np, remote, plan.job);
    Status st = makeLaunch(p, remote, env, p.local_size, "rank", start, &l);
    if (!st.isOk()) {
      for (auto& done : *launches) {
        ::close(done.stdout_file);
        ::close(done.stderr_file);
      }
      return st;
    }
    l.rsh_agent = remote && !start.rsh_agent.empty();
    if (o.verbose) {
      say("rank " + std::to_string(p.rank) + " -> " + p.host + " (local rank " +
          std::to_string(p.local_rank) + "/" + std::to_string(p.local_size) + ", cross rank " +
          std::to_string(p.cross_rank) + "/" + std::to_string(p.cross_size) + ")" +
          (remote ? " " + launchVia(true, start) : ""));
    }
    launches->push_back(std::move(l));
  }
  return Status::ok();
}

// A fixed-size job: its ranks under the Job's control, until they end.
int runFixedJob(const LaunchOptions& o, const JobPlan& plan, const StartOptions& start,
                RendezvousServer* server) {
  if (o.verbose) {
    say("rendezvous server on port " + std::to_string(plan.job.rendezvous_port) + "; " +
        std::to_string(plan.np) + " ranks on " + std::to_string(plan.placement.back().cross_size) +
        " host(s)");
  }
  std::vector<RankLaunch> launches;
  Status st = makeLaunches(o, plan, start, &launches);
  if (!st.isOk()) return fail(kExitStartFailed, st);
  JobConfig config;
  config.start_timeout_seconds = o.start_timeout_seconds;
  config.grace_seconds = o.grace_seconds;
  config.verbose = o.verbose;
  config.arrived_ranks = [server] { return arrivedRanks(*server); };
  Job job_control(config);
  st = job_control.start(std::move(launches));
  if (!st.isOk()) return fail(kExitStartFailed, st);
  return job_control.wait();
}

StartOptions startOptions(const LaunchOptions& o, const JobPlan& plan, const std::string& cwd) {
  StartOptions start;
  start.ssh = {o.ssh_port, o.ssh_identity};
  start.rsh_agent = o.rsh_agent_words;
  start.grace_seconds = static_cast<int>(o.grace_seconds + 0.5);
  start.cwd = cwd;
  start.launcher_env = plan.launcher_env;
  start.command = o.command;
  start.output_dir = o.output_dir;
  return start;
}

}  // namespace

int planJob(const LaunchOptions& o, const EnvMap& launcher_env, JobPlan* plan, Status* error) {
  plan->launcher_env = launcher_env;
  int code = resolveHosts(o, launcher_env, &plan->hosts, error);
  if (code == kExitOk) code = placeRanks(o, plan, error);
  if (code == kExitOk) code = buildJobEnv(o, plan, error);
  if (code == kExitOk) code = chooseRendezvousAddress(o, plan, error);
  plan->job.remote_hostname = o.rsh_agent_words.empty();
  return code;
}

int runJob(const LaunchOptions& o) {
  applyLogLevel(o);
  JobPlan plan;
  Status st;
  int code = planJob(o, currentEnvironment(), &plan, &st);
  if (code != kExitOk) return fail(code, st);
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
    return fail(kExitStartFailed, Status::ioError(std::string("getcwd: ") + std::strerror(errno)));
  }
  // The rendezvous server and the secret.
  st = generateSecret(&plan.job.secret);
  if (!st.isOk()) return fail(kExitStartFailed, st);
  std::unique_ptr<RendezvousServer> server;
  st = RendezvousServer::start("0.0.0.0", 0, plan.job.secret, &server);
  if (!st.isOk()) return fail(kExitStartFailed, st);
  plan.job.rendezvous_port = server->port();
  const StartOptions start = startOptions(o, plan, cwd);
  if (o.elastic()) {
    if (o.verbose) {
      say("rendezvous server on port " + std::to_string(plan.job.rendezvous_port) +
          "; elastic job on " + std::to_string(plan.hosts.size()) + " host(s)");
    }
    code = runElasticJob(o, plan.job, start, plan.hosts, *server);
  } else {
    code = runFixedJob(o, plan, start, server.get());
  }
  server->stop();
  return code;
}

}  // namespace launcher
}  // namespace tutti

#include "launcher/mpi_launch.h"

#include <unistd.h>

#include <algorithm>

#include "launcher/allocation.h"
#include "launcher/mpirun_watch.h"
#include "launcher/placement.h"

namespace tutti {
namespace launcher {
namespace {

int failWith(int code, const std::string& message) {
  std::string line = "tuttirun: " + message + "\n";
  (void)!::write(2, line.data(), line.size());
  return code;
}

}  // namespace

Status mpirunCommand(const LaunchOptions& o, const MpirunContext& c,
                     std::vector<std::string>* argv) {
  auto it = c.env.find("TUTTI_BACKEND");
  if (it != c.env.end() && it->second != "mpi" && it->second != "auto") {
    return Status::invalidArgument("--mpi runs the mpi backend, but TUTTI_BACKEND=" + it->second +
                                   " (from --backend, -x or the environment): drop one of them");
  }
  // Inside an allocation (Slurm, the MPI Operator's default hostfile) without
  // -H / --hostfile, mpirun places the ranks from the allocation itself.
  const bool from_allocation = c.hosts.empty() && mpirunHasAllocation(c.env);
  std::vector<HostSlots> hosts = c.hosts;
  if (hosts.empty()) hosts = {{"localhost", c.np}};
  int most_local = 0, per_host = 1;
  if (!from_allocation) {
    std::vector<RankPlacement> placement;
    TUTTI_RETURN_IF_ERROR(assignRanks(hosts, c.np, &placement));
    for (const RankPlacement& p : placement) {
      per_host = std::max(per_host, p.local_size);
      if (isLocalHost(p.host)) most_local = std::max(most_local, p.local_size);
    }
  }

  std::vector<std::string>& a = *argv;
  a = {"mpirun"};
  if (c.root) a.push_back("--allow-run-as-root");
  if (c.np > 0) a.insert(a.end(), {"-np", std::to_string(c.np)});
  if (!from_allocation) {
    std::string host_list;
    for (const HostSlots& h : hosts) {
      if (!host_list.empty()) host_list += ",";
      host_list += h.host + ":" + std::to_string(h.slots);
    }
    a.insert(a.end(), {"-H", host_list});
  }
  a.insert(a.end(), {"--map-by", "slot", "--bind-to", "none", "--tag-output"});
  if (most_local > c.local_cores) {
    // More ranks than cores here: MPI must yield the CPU while it waits.
    a.insert(a.end(), {"--oversubscribe", "--mca", "mpi_yield_when_idle", "1"});
  }
  if (!o.output_dir.empty()) a.insert(a.end(), {"--output-filename", o.output_dir});
  if (!o.network_interface.empty()) {
    a.insert(a.end(), {"--mca", "btl_tcp_if_include", o.network_interface, "--mca",
                       "oob_tcp_if_include", o.network_interface});
  }
  std::string ssh_args;
  if (o.ssh_port > 0) ssh_args += "-p " + std::to_string(o.ssh_port);
  if (!o.ssh_identity.empty()) ssh_args += (ssh_args.empty() ? "-i " : " -i ") + o.ssh_identity;
  if (!ssh_args.empty()) a.insert(a.end(), {"--mca", "plm_rsh_args", ssh_args});

  // Variables: every TUTTI_* knob, every -x name, the backend, OMP_NUM_THREADS.
  std::vector<std::string> names;
  for (const auto& [name, value] : c.env) {
    (void)value;
    if (name.compare(0, 6, "TUTTI_") == 0 && !isPlacementVariable(name)) names.push_back(name);
  }
  for (const std::string& name : c.env_names) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  for (const std::string& name : names) {
    if (name == "TUTTI_BACKEND") continue;
    auto v = c.env.find(name);
    if (v != c.env.end()) a.insert(a.end(), {"-x", name + "=" + v->second});
  }
  a.insert(a.end(), {"-x", "TUTTI_BACKEND=mpi"});
  if (c.env.count("OMP_NUM_THREADS") == 0) {
    a.insert(a.end(),
             {"-x", "OMP_NUM_THREADS=" + std::to_string(std::max(1, c.local_cores / per_host))});
  }
  a.insert(a.end(), o.command.begin(), o.command.end());
  return Status::ok();
}

int runWithMpirun(const LaunchOptions& o) {
  MpirunContext c;
  Status st;
  if (!o.hosts.empty()) {
    st = parseHostList(o.hosts, &c.hosts);
  } else if (!o.hostfile.empty()) {
    st = readHostfile(o.hostfile, &c.hosts);
  }
  if (!st.isOk()) return failWith(kExitUsage, st.message());
  c.np = o.np > 0 ? o.np : (c.hosts.empty() ? 0 : totalSlots(c.hosts));
  const EnvMap launcher_env = currentEnvironment();
  c.env = launcher_env;
  st = validateInheritedSettings(c.env);
  if (st.isOk()) st = applyEnvFlags(o.env_flags, launcher_env, &c.env);
  if (st.isOk()) st = validateInheritedSettings(c.env);
  if (!st.isOk()) return failWith(kExitUsage, st.message());
  for (const auto& [name, value] : o.settings) c.env[name] = value;
  for (const std::string& x : o.env_flags) c.env_names.push_back(x.substr(0, x.find('=')));
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  c.local_cores = cores > 0 ? static_cast<int>(cores) : 1;
  c.root = ::geteuid() == 0;

  std::vector<std::string> argv;
  st = mpirunCommand(o, c, &argv);
  if (!st.isOk()) return failWith(kExitUsage, st.message());
  if (o.verbose) {
    std::string line = "tuttirun: running";
    for (const std::string& arg : argv) line += " " + arg;
    (void)!::write(2, (line + "\n").data(), line.size() + 1);
  }
  MpirunWatch watch;
  watch.np = c.np;
  watch.grace_seconds = o.grace_seconds;
  return runMpirun(argv, watch);
}

}  // namespace launcher
}  // namespace tutti

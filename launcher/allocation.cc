#include "launcher/allocation.h"

#include "core/slurm.h"

namespace tutti {
namespace launcher {
namespace {

const char* kDefaultHostfile = "OMPI_MCA_orte_default_hostfile";

std::string lookup(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

Status slurmAllocation(const EnvMap& env, Allocation* out) {
  const std::string nodes = lookup(env, "SLURM_JOB_NODELIST");
  std::string slots_var = "SLURM_TASKS_PER_NODE";
  std::string slots_text = lookup(env, "SLURM_TASKS_PER_NODE");
  if (slots_text.empty()) {
    slots_var = "SLURM_JOB_CPUS_PER_NODE";
    slots_text = lookup(env, slots_var.c_str());
  }
  const std::string where = "the Slurm allocation (SLURM_JOB_NODELIST=" + nodes + ")";
  if (slots_text.empty()) {
    return Status::invalidArgument(where +
                                   ": neither SLURM_TASKS_PER_NODE nor SLURM_JOB_CPUS_PER_NODE "
                                   "is set; give the hosts with -H or --hostfile");
  }
  std::vector<std::string> names;
  std::vector<int> slots;
  Status st = expandHostlist(nodes, &names);
  if (st.isOk()) st = expandTasksPerNode(slots_text, &slots);
  if (!st.isOk()) return Status::invalidArgument(where + ": " + st.message());
  if (slots.size() != names.size()) {
    return Status::invalidArgument(where + ": " + slots_var + "=" + slots_text + " gives " +
                                   std::to_string(slots.size()) + " node(s), the node list " +
                                   std::to_string(names.size()));
  }
  out->hosts.clear();
  for (size_t i = 0; i < names.size(); ++i) addHostSlots(&out->hosts, {names[i], slots[i]});
  out->source = where;
  out->found = true;
  return Status::ok();
}

}  // namespace

Status findAllocation(const EnvMap& env, Allocation* out) {
  *out = Allocation();
  const std::string hostfile = lookup(env, kDefaultHostfile);
  if (!hostfile.empty()) {
    Status st = readHostfile(hostfile, &out->hosts);
    if (!st.isOk()) {
      return Status::invalidArgument(std::string("$") + kDefaultHostfile + ": " + st.message());
    }
    out->source = std::string("$") + kDefaultHostfile + " (" + hostfile + ")";
    out->found = true;
    return Status::ok();
  }
  if (!lookup(env, "SLURM_JOB_NODELIST").empty()) return slurmAllocation(env, out);
  return Status::ok();
}

bool mpirunHasAllocation(const EnvMap& env) {
  return !lookup(env, kDefaultHostfile).empty() || !lookup(env, "SLURM_JOB_NODELIST").empty();
}

}  // namespace launcher
}  // namespace tutti

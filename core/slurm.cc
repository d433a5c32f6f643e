#include "core/slurm.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <optional>

namespace tutti {
namespace {

constexpr size_t kMaxHosts = 1 << 20;

Status badList(const std::string& list, const std::string& why) {
  return Status::invalidArgument("hostlist '" + list + "': " + why +
                                 " (expected names like node1, node[1-4,7] or gpu[01-16],login)");
}

bool parseNumber(const std::string& text, long long* out) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *out = std::strtoll(text.c_str(), nullptr, 10);
  return true;
}

std::string padded(long long v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Expands the numbers of one bracket group "1,3-5,07-09" into strings.
Status expandGroup(const std::string& list, const std::string& group,
                   std::vector<std::string>* out) {
  size_t start = 0;
  while (start <= group.size()) {
    size_t comma = group.find(',', start);
    if (comma == std::string::npos) comma = group.size();
    const std::string item = group.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string lo_text = item.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : item.substr(dash + 1);
    long long lo = 0, hi = 0;
    if (!parseNumber(lo_text, &lo) || !parseNumber(hi_text, &hi)) {
      return badList(list, "bad range '" + item + "' in [" + group + "]");
    }
    if (hi < lo) return badList(list, "range '" + item + "' ends below its start");
    if (static_cast<size_t>(hi - lo) >= kMaxHosts) return badList(list, "more than 1048576 hosts");
    for (long long v = lo; v <= hi; ++v) out->push_back(padded(v, lo_text.size()));
    start = comma + 1;
  }
  return Status::ok();
}

// Expands one name with bracket groups ("rack[1-2]-n[1-3]") into `out`.
Status expandName(const std::string& list, const std::string& name, std::vector<std::string>* out) {
  std::vector<std::string> partial = {""};
  size_t i = 0;
  while (i < name.size()) {
    size_t open = name.find('[', i);
    const std::string text = name.substr(i, open == std::string::npos ? open : open - i);
    if (text.find(']') != std::string::npos) return badList(list, "unbalanced ']'");
    for (auto& p : partial) p += text;
    if (open == std::string::npos) break;
    size_t close = name.find(']', open);
    if (close == std::string::npos) return badList(list, "unbalanced '['");
    std::vector<std::string> numbers;
    TUTTI_RETURN_IF_ERROR(expandGroup(list, name.substr(open + 1, close - open - 1), &numbers));
    if (partial.size() * numbers.size() > kMaxHosts) {
      return badList(list, "more than 1048576 hosts");
    }
    std::vector<std::string> next;
    for (const auto& p : partial) {
      for (const auto& n : numbers) next.push_back(p + n);
    }
    partial.swap(next);
    i = close + 1;
  }
  out->insert(out->end(), partial.begin(), partial.end());
  return Status::ok();
}

std::optional<long long> envNumber(const EnvLookup& env, const char* name) {
  auto v = env(name);
  long long n = 0;
  if (!v.has_value() || !parseNumber(*v, &n)) return std::nullopt;
  return n;
}

// The first of `names` that is set.
std::optional<std::string> firstSet(const EnvLookup& env, std::initializer_list<const char*> names,
                                    std::string* which) {
  for (const char* name : names) {
    auto v = env(name);
    if (v.has_value() && !v->empty()) {
      *which = name;
      return v;
    }
  }
  return std::nullopt;
}

}  // namespace

Status expandHostlist(const std::string& list, std::vector<std::string>* hosts) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return badList(list, "unbalanced ']'");
    if (c != ',' || depth > 0) continue;
    const std::string name = list.substr(start, i - start);
    if (name.empty()) return badList(list, "empty host name");
    TUTTI_RETURN_IF_ERROR(expandName(list, name, &out));
    if (out.size() > kMaxHosts) return badList(list, "more than 1048576 hosts");
    start = i + 1;
  }
  if (depth != 0) return badList(list, "unbalanced '['");
  *hosts = out;
  return Status::ok();
}

Status expandTasksPerNode(const std::string& text, std::vector<int>* counts) {
  std::vector<int> out;
  size_t start = 0;
  auto bad = [&](const std::string& item) {
    return Status::invalidArgument("tasks per node '" + text + "': bad item '" + item +
                                   "' (expected counts like 2(x3),1)");
  };
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    const size_t paren = item.find('(');
    long long count = 0, repeat = 1;
    if (!parseNumber(item.substr(0, paren), &count) || count < 1 || count > (1 << 20)) {
      return bad(item);
    }
    if (paren != std::string::npos) {
      if (item.compare(paren, 2, "(x") != 0 || item.back() != ')' ||
          !parseNumber(item.substr(paren + 2, item.size() - paren - 3), &repeat) || repeat < 1 ||
          out.size() + static_cast<size_t>(repeat) > kMaxHosts) {
        return bad(item);
      }
    }
    out.insert(out.end(), static_cast<size_t>(repeat), static_cast<int>(count));
    start = comma + 1;
  }
  *counts = out;
  return Status::ok();
}

bool underSlurmStep(const EnvLookup& env) {
  // Slurm's batch and extern steps (a batch script, not srun) have ids
  // 0xfffffffe / 0xfffffffd and above; their tasks are not the job's ranks.
  auto step = envNumber(env, "SLURM_STEP_ID");
  return step.has_value() && *step < 0xfffffff0LL && !env("TUTTI_RANK").has_value() &&
         !env("OMPI_COMM_WORLD_SIZE").has_value();
}

int slurmRendezvousPort(long long job_id, long long step_id) {
  return 20000 + static_cast<int>((job_id * 8 + step_id) % 12000);
}

Status applySlurmPlacement(const EnvLookup& env, Settings* s) {
  auto missing = [](const std::string& what) {
    return Status::invalidArgument(
        "srun task (SLURM_STEP_ID is set, TUTTI_RANK is not): " + what +
        "; start the job with srun, or set TUTTI_RANK, TUTTI_SIZE, ... yourself");
  };
  auto number = [&](std::initializer_list<const char*> names, long long* out) -> Status {
    std::string which;
    auto v = firstSet(env, names, &which);
    if (!v.has_value()) return missing(std::string(*names.begin()) + " is not set");
    if (!parseNumber(*v, out) || *out > (1 << 20)) {
      return missing(which + "=" + *v + " is not a non-negative integer");
    }
    return Status::ok();
  };
  long long rank = 0, size = 0, local_rank = 0, node = 0, nodes = 0;
  TUTTI_RETURN_IF_ERROR(number({"SLURM_PROCID"}, &rank));
  TUTTI_RETURN_IF_ERROR(number({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &size));
  TUTTI_RETURN_IF_ERROR(number({"SLURM_LOCALID"}, &local_rank));
  TUTTI_RETURN_IF_ERROR(number({"SLURM_NODEID"}, &node));
  TUTTI_RETURN_IF_ERROR(number({"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}, &nodes));
  std::string which;
  auto per_node_text = firstSet(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &which);
  if (!per_node_text.has_value()) return missing("SLURM_STEP_TASKS_PER_NODE is not set");
  std::vector<int> per_node;
  TUTTI_RETURN_IF_ERROR(expandTasksPerNode(*per_node_text, &per_node));
  if (node >= static_cast<long long>(per_node.size())) {
    return missing("SLURM_NODEID=" + std::to_string(node) + " but " + which + "=" + *per_node_text +
                   " lists " + std::to_string(per_node.size()) + " node(s)");
  }
  auto set = [&](const char* name, int* field, long long value) {
    if (!env(name).has_value()) *field = static_cast<int>(value);
  };
  set("TUTTI_SIZE", &s->size, size);
  s->rank = static_cast<int>(rank);  // TUTTI_RANK is unset here (underSlurmStep)
  set("TUTTI_LOCAL_RANK", &s->local_rank, local_rank);
  set("TUTTI_LOCAL_SIZE", &s->local_size, per_node[static_cast<size_t>(node)]);
  set("TUTTI_CROSS_RANK", &s->cross_rank, node);
  set("TUTTI_CROSS_SIZE", &s->cross_size, nodes);
  if (!env("TUTTI_RENDEZVOUS_ADDR").has_value()) {
    auto list = firstSet(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}, &which);
    if (!list.has_value()) return missing("SLURM_STEP_NODELIST is not set");
    std::vector<std::string> hosts;
    TUTTI_RETURN_IF_ERROR(expandHostlist(*list, &hosts));
    s->rendezvous_addr = hosts.front();
  }
  if (!env("TUTTI_RENDEZVOUS_PORT").has_value()) {
    auto job = envNumber(env, "SLURM_JOB_ID");
    auto step = envNumber(env, "SLURM_STEP_ID");
    if (!job.has_value()) return missing("SLURM_JOB_ID is not set or not a number");
    s->rendezvous_port = slurmRendezvousPort(*job, step.value_or(0));
  }
  return Status::ok();
}

}  // namespace tutti

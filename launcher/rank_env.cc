#include "launcher/rank_env.h"

#include <sodium.h>

#include <algorithm>
#include <cctype>

#include "core/settings.h"

extern char** environ;

namespace tutti {
namespace launcher {
namespace {

// Placement variables: written by tuttirun for each rank, never inherited.
const char* const kPlacementVars[] = {
    "TUTTI_RANK",
    "TUTTI_SIZE",
    "TUTTI_LOCAL_RANK",
    "TUTTI_LOCAL_SIZE",
    "TUTTI_CROSS_RANK",
    "TUTTI_CROSS_SIZE",
    "TUTTI_RENDEZVOUS_ADDR",
    "TUTTI_RENDEZVOUS_PORT",
    "TUTTI_RENDEZVOUS_SERVER",
    "TUTTI_SECRET",
    "TUTTI_HOSTNAME",
    "TUTTI_ELASTIC_WORKER_ID",
    "TUTTI_ELASTIC_TIMEOUT_SECONDS",
};

// What every process of the job gets, placement aside.
EnvMap jobEnvironment(const std::string& host, int local_size, bool remote, const JobEnv& job) {
  EnvMap env;
  for (const auto& [name, value] : job.base) {
    if (remote && isHostSpecificVariable(name)) continue;
    env[name] = value;
  }
  for (const char* var : kPlacementVars) env.erase(var);
  env["TUTTI_RENDEZVOUS_ADDR"] = remote ? job.remote_rendezvous_addr : job.local_rendezvous_addr;
  env["TUTTI_RENDEZVOUS_PORT"] = std::to_string(job.rendezvous_port);
  env["TUTTI_RENDEZVOUS_SERVER"] = "external";
  env["TUTTI_SECRET"] = job.secret;
  if (remote && job.remote_hostname) {
    env["TUTTI_HOSTNAME"] = host;
  } else if (!remote && !job.local_hostname.empty()) {
    env["TUTTI_HOSTNAME"] = job.local_hostname;
  }
  if (!remote && env.count("OMP_NUM_THREADS") == 0) {
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, job.cores / std::max(1, local_size)));
  }
  return env;
}

}  // namespace

EnvMap currentEnvironment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

Status applyEnvFlags(const std::vector<std::string>& flags, const EnvMap& from, EnvMap* env) {
  for (const auto& flag : flags) {
    size_t eq = flag.find('=');
    if (eq != std::string::npos) {
      (*env)[flag.substr(0, eq)] = flag.substr(eq + 1);
      continue;
    }
    auto it = from.find(flag);
    if (it == from.end()) {
      return Status::invalidArgument("-x " + flag + ": " + flag +
                                     " is not set in tuttirun's environment (use -x " + flag +
                                     "=value to set it)");
    }
    (*env)[flag] = it->second;
  }
  return Status::ok();
}

Status validateInheritedSettings(const EnvMap& env) {
  for (const auto& [name, value] : env) {
    if (name.compare(0, 6, "TUTTI_") != 0) continue;
    if (std::find(std::begin(kPlacementVars), std::end(kPlacementVars), name) !=
        std::end(kPlacementVars)) {
      continue;
    }
    const SettingSpec* spec = findSettingSpec(name);
    if (spec == nullptr) continue;
    Status st = validateSetting(*spec, value);
    if (!st.isOk()) {
      return Status::invalidArgument(st.message() + " [set in tuttirun's environment or by -x]");
    }
  }
  return Status::ok();
}

bool isPlacementVariable(const std::string& name) {
  return std::find(std::begin(kPlacementVars), std::end(kPlacementVars), name) !=
         std::end(kPlacementVars);
}

Status generateSecret(std::string* secret) {
  if (sodium_init() < 0) return Status::internal("libsodium could not be initialised");
  unsigned char bytes[32];
  randombytes_buf(bytes, sizeof(bytes));
  char hex[2 * sizeof(bytes) + 1];
  sodium_bin2hex(hex, sizeof(hex), bytes, sizeof(bytes));
  *secret = hex;
  sodium_memzero(bytes, sizeof(bytes));
  return Status::ok();
}

bool isHostSpecificVariable(const std::string& name) {
  static const char* const kExact[] = {"HOSTNAME",
                                       "HOST",
                                       "HOME",
                                       "USER",
                                       "LOGNAME",
                                       "SHELL",
                                       "PWD",
                                       "OLDPWD",
                                       "SHLVL",
                                       "_",
                                       "TERM",
                                       "DISPLAY",
                                       "XAUTHORITY",
                                       "MAIL",
                                       "TMUX",
                                       "TMUX_PANE",
                                       "STY",
                                       "WINDOWID",
                                       "LS_COLORS",
                                       "XDG_RUNTIME_DIR",
                                       "XDG_SESSION_ID",
                                       "DBUS_SESSION_BUS_ADDRESS"};
  for (const char* e : kExact) {
    if (name == e) return true;
  }
  if (name.compare(0, 4, "SSH_") == 0 || name.compare(0, 9, "BASH_FUNC") == 0) return true;
  // Names a POSIX shell cannot export are not carried either.
  return !isExportableName(name);
}

bool isExportableName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string unexportableWarning(const EnvMap& base) {
  std::string names;
  for (const auto& [name, value] : base) {
    if (!isExportableName(name)) names += (names.empty() ? "" : ", ") + name;
  }
  if (names.empty()) return "";
  return "not carried to ranks on other hosts (ssh): " + names +
         " (a shell cannot export these names; use letters, digits and _)";
}

EnvMap rankEnvironment(const RankPlacement& rank, int world_size, bool remote, const JobEnv& job) {
  EnvMap env = jobEnvironment(rank.host, rank.local_size, remote, job);
  env["TUTTI_RANK"] = std::to_string(rank.rank);
  env["TUTTI_SIZE"] = std::to_string(world_size);
  env["TUTTI_LOCAL_RANK"] = std::to_string(rank.local_rank);
  env["TUTTI_LOCAL_SIZE"] = std::to_string(rank.local_size);
  env["TUTTI_CROSS_RANK"] = std::to_string(rank.cross_rank);
  env["TUTTI_CROSS_SIZE"] = std::to_string(rank.cross_size);
  return env;
}

EnvMap workerEnvironment(int worker_id, const std::string& elastic_timeout_seconds,
                         const std::string& host, int host_slots, bool remote, const JobEnv& job) {
  EnvMap env = jobEnvironment(host, host_slots, remote, job);
  env["TUTTI_ELASTIC_WORKER_ID"] = std::to_string(worker_id);
  env["TUTTI_ELASTIC_TIMEOUT_SECONDS"] = elastic_timeout_seconds;
  return env;
}

std::vector<std::string> envStrings(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

}  // namespace launcher
}  // namespace tutti

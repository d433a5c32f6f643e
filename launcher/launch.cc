#include "launcher/launch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace

Status makeLaunch(const RankPlacement& placement, bool remote, const EnvMap& env,
                  int omp_local_size, const std::string& dir_prefix, const StartOptions& options,
                  RankLaunch* out) {
  RankLaunch l;
  l.placement = placement;
  l.remote = remote;
  if (remote) {
    l.request.argv =
        options.rsh_agent.empty()
            ? sshCommand(placement.host, options.ssh, options.grace_seconds)
            : rshAgentCommand(options.rsh_agent, placement.host, options.grace_seconds);
    l.request.env = envStrings(options.launcher_env);
    l.request.stdin_pipe = true;
    l.stdin_script = remoteScript(env, options.cwd, options.command, omp_local_size);
  } else {
    l.request.argv = options.command;
    l.request.env = envStrings(env);
  }
  if (!options.output_dir.empty()) {
    std::string dir = options.output_dir + "/" + dir_prefix + "." + std::to_string(placement.rank);
    Status st = makeDirs(dir);
    if (st.isOk()) st = openOutputFile(dir + "/stdout", &l.stdout_file);
    if (st.isOk()) st = openOutputFile(dir + "/stderr", &l.stderr_file);
    if (!st.isOk()) {
      if (l.stdout_file >= 0) ::close(l.stdout_file);
      return st;
    }
  }
  *out = std::move(l);
  return Status::ok();
}

std::string launchVia(bool remote, const StartOptions& options) {
  if (!remote) return "";
  return options.rsh_agent.empty() ? "via ssh" : "via the rsh agent";
}

}  // namespace launcher
}  // namespace tutti

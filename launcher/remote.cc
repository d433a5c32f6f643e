#include "launcher/remote.h"

namespace tutti {
namespace launcher {

std::string shellQuote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\"'\"'";
    } else if (c == '\n') {
      out += "'\"$nl\"'";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string remoteBootstrap(int grace_seconds) {
  // Only double quotes inside: the whole program travels in single quotes.
  // Lines are joined with ';' (the script's lines are complete commands).
  // fd 3 keeps ssh's stdin for the watcher: a background list in a
  // non-interactive shell gets /dev/null as its stdin. `wait 2>/dev/null`:
  // dash reports a rank killed by a signal ("Terminated") on its stderr.
  std::string g = std::to_string(grace_seconds);
  return std::string("s=; while IFS= read -r l; do if [ \"$l\" = \"") + kScriptEnd +
         "\" ]; then break; fi; s=\"$s$l;\"; done; "
         "[ \"$l\" = \"" +
         kScriptEnd +
         "\" ] || exit 125; "
         "eval \"$s\"; exec 3<&0; "
         "setsid \"$@\" </dev/null 3<&- & p=$!; "
         // k SIG: signal the rank's process group, retrying for up to ~1 s:
         // right after the start the child may not have called setsid yet,
         // and then the group does not exist and the signal would be lost.
         "k() { i=0; while ! kill -s \"$1\" -- -$p 2>/dev/null; do i=$((i+1)); "
         "[ $i -gt 20 ] && return; kill -0 $p 2>/dev/null || return; sleep 0.05; done; }; "
         "( while IFS= read -r c <&3; do case \"$c\" in "
         "INT|TERM|KILL|HUP|QUIT|USR1|USR2) k \"$c\";; esac; done; "
         "k TERM; sleep " +
         g +
         "; kill -s KILL -- -$p ) >/dev/null 2>&1 & w=$!; "
         "exec 3<&-; wait $p 2>/dev/null; r=$?; kill -s KILL -- -$p 2>/dev/null; kill $w "
         "2>/dev/null; "
         "exit $r";
}

std::vector<std::string> sshCommand(const std::string& host, const SshOptions& ssh,
                                    int grace_seconds) {
  std::vector<std::string> argv = {"ssh"};
  if (ssh.port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(ssh.port));
  }
  if (!ssh.identity.empty()) {
    argv.push_back("-i");
    argv.push_back(ssh.identity);
  }
  for (const char* opt : {"BatchMode=yes", "StrictHostKeyChecking=no",
                          "UserKnownHostsFile=/dev/null", "LogLevel=ERROR", "ConnectTimeout=30"}) {
    argv.push_back("-o");
    argv.push_back(opt);
  }
  argv.push_back("-T");  // no pty: the rank's output stays two clean streams
  argv.push_back(host);
  argv.push_back("sh -c " + shellQuote(remoteBootstrap(grace_seconds)));
  return argv;
}

std::string remoteScript(const EnvMap& env, const std::string& cwd,
                         const std::vector<std::string>& command, int omp_local_size) {
  std::string script = "nl=\"$(printf \"\\nx\")\"\nnl=\"${nl%x}\"\n";
  for (const auto& [name, value] : env) {
    script += "export " + name + "=" + shellQuote(value) + "\n";
  }
  if (omp_local_size > 0 && env.count("OMP_NUM_THREADS") == 0) {
    script += "n=$(nproc 2>/dev/null || echo 1); n=$((n / " + std::to_string(omp_local_size) +
              ")); [ \"$n\" -ge 1 ] || n=1; export OMP_NUM_THREADS=$n\n";
  }
  script += "cd " + shellQuote(cwd) + " || { echo \"tuttirun: cannot cd to \"" + shellQuote(cwd) +
            "\" on $(hostname)\" >&2; exit 126; }\n";
  script += "set --";
  for (const auto& word : command) script += " " + shellQuote(word);
  script += "\n";
  script += std::string(kScriptEnd) + "\n";
  return script;
}

}  // namespace launcher
}  // namespace tutti

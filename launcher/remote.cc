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
         // A background job of a non-interactive sh starts with SIGINT and
         // SIGQUIT ignored (and the rank could not undo it), so a forwarded
         // Ctrl-C would do nothing: env --default-signal (coreutils >= 8.31)
         // restores them where the remote env has it.
         "d=; env --default-signal=INT true 2>/dev/null && d=\"env --default-signal=INT,QUIT\"; "
         "setsid $d \"$@\" </dev/null 3<&- & p=$!; "
         // k SIG: signal the rank's process group, retrying for up to ~1 s:
         // right after the start the child may not have called setsid yet,
         // and then the group does not exist and the signal would be lost.
         "k() { i=0; while ! kill -s \"$1\" -- -$p 2>/dev/null; do i=$((i+1)); "
         "[ $i -gt 20 ] && return; kill -0 $p 2>/dev/null || return; sleep 0.05; done; }; "
         // After each signal the group is continued (SIGCONT): a stopped rank
         // acts on it now instead of at the SIGKILL after the grace.
         "( while IFS= read -r c <&3; do case \"$c\" in "
         "INT|TERM|KILL|HUP|QUIT|USR1|USR2) k \"$c\"; kill -s CONT -- -$p 2>/dev/null;; esac; "
         "done; "
         "k TERM; kill -s CONT -- -$p 2>/dev/null; sleep " +
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

std::vector<std::string> rshAgentCommand(const std::vector<std::string>& agent_words,
                                         const std::string& host, int grace_seconds) {
  const std::string placeholder = "{host}";
  std::vector<std::string> argv;
  bool replaced = false;
  for (std::string word : agent_words) {
    for (size_t at = word.find(placeholder); at != std::string::npos;
         at = word.find(placeholder, at + host.size())) {
      word.replace(at, placeholder.size(), host);
      replaced = true;
    }
    argv.push_back(word);
  }
  if (!replaced) argv.push_back(host);
  for (const char* w : {"sh", "-c"}) argv.push_back(w);
  argv.push_back(remoteBootstrap(grace_seconds));
  return argv;
}

Status splitShellWords(const std::string& text, std::vector<std::string>* words) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      size_t end = text.find('\'', i + 1);
      if (end == std::string::npos)
        return Status::invalidArgument("unterminated ' in '" + text + "'");
      word += text.substr(i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size() &&
            std::string("\"\\$`").find(text[j + 1]) != std::string::npos) {
          ++j;
        }
        word += text[j];
      }
      if (j >= text.size()) return Status::invalidArgument("unterminated \" in '" + text + "'");
      i = j;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) {
        return Status::invalidArgument("trailing \\ in '" + text + "'");
      }
      word += text[++i];
    } else {
      word += c;
    }
  }
  if (in_word) out.push_back(word);
  *words = out;
  return Status::ok();
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

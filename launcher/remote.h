#pragma once

// Starting a rank on another host through ssh, or through an rsh agent
// (--rsh-agent 'CMD {host}', as Open MPI's plm_rsh_agent), without its secret
// on any command line.
//
// The ssh (or agent) command line carries only a fixed bootstrap (a POSIX sh program,
// the same for every job). The bootstrap reads a script from ssh's stdin up
// to a "#tutti-run" line: exports of the rank's environment (the secret
// among them), `cd` into the working directory, and the command as `set --`
// words. It then starts the command in a session of its own (setsid) and
// keeps reading stdin as a control channel:
//   - a line "INT", "TERM", "KILL", ... sends that signal to the rank's
//     process group;
//   - end of input (tuttirun closed the pipe or died, so ssh went away)
//     sends SIGTERM, then SIGKILL after the grace period.
// When the rank exits, the bootstrap kills what is left of its process
// group and exits with the rank's code (128+N for signal N), which ssh
// returns to tuttirun (ssh and agents pass it on).

#include <string>
#include <vector>

#include "launcher/rank_env.h"

namespace tutti {
namespace launcher {

struct SshOptions {
  int port = 0;          // 0: ssh's default
  std::string identity;  // "" : ssh's default keys
};

// Marker line that ends the script on the bootstrap's stdin.
constexpr const char* kScriptEnd = "#tutti-run";

// The POSIX sh program that runs on the remote host (no secrets in it).
std::string remoteBootstrap(int grace_seconds);

// argv of the ssh client for `host`.
std::vector<std::string> sshCommand(const std::string& host, const SshOptions& ssh,
                                    int grace_seconds);

// argv of an rsh agent for `host`: `agent_words` (the split --rsh-agent
// template) with every "{host}" replaced by `host` (or `host` appended when no
// word has "{host}"), then "sh", "-c", the bootstrap, as separate words: the
// agent executes them (`ip netns exec h1 sh -c ...`, `kubectl exec -i pod --
// sh -c ...`) and connects its stdin to the bootstrap's.
std::vector<std::string> rshAgentCommand(const std::vector<std::string>& agent_words,
                                         const std::string& host, int grace_seconds);

// Splits `text` into words as a POSIX shell does, without expansions: blanks
// separate words; '...' keeps everything; in "..." a backslash escapes only
// " \ $ and `; outside quotes a backslash keeps the next character.
// kInvalidArgument for an unterminated quote or a trailing backslash.
Status splitShellWords(const std::string& text, std::vector<std::string>* words);

// The script sent on ssh's stdin: environment, working directory, command,
// terminated by kScriptEnd. `omp_local_size` > 0: if OMP_NUM_THREADS is not
// in `env`, the remote host sets it to max(1, its cores / omp_local_size).
std::string remoteScript(const EnvMap& env, const std::string& cwd,
                         const std::vector<std::string>& command, int omp_local_size);

// Quotes a word for a POSIX shell: 'it'"'"'s'. A newline becomes "$nl", a
// variable the script defines, so that no script line contains a newline.
std::string shellQuote(const std::string& word);

}  // namespace launcher
}  // namespace tutti

#include "launcher/rank_env.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "launcher/output.h"
#include "launcher/remote.h"

namespace tutti {
namespace launcher {
namespace {

JobEnv sampleJob() {
  JobEnv job;
  job.base = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/root"}, {"SSH_AUTH_SOCK", "/tmp/a"},
              {"TUTTI_RANK", "7"},       {"MY_VAR", "x"},   {"TUTTI_CYCLE_TIME_MS", "2"}};
  job.secret = "s3cr3t";
  job.rendezvous_port = 4242;
  job.remote_rendezvous_addr = "10.0.0.1";
  job.cores = 4;
  return job;
}

TEST(RankEnv, PlacementVariablesForALocalRank) {
  RankPlacement p{3, "localhost", 0, 1, 2, 1, 2};
  EnvMap env = rankEnvironment(p, 4, false, sampleJob());
  EXPECT_EQ(env["TUTTI_RANK"], "3");
  EXPECT_EQ(env["TUTTI_SIZE"], "4");
  EXPECT_EQ(env["TUTTI_LOCAL_RANK"], "1");
  EXPECT_EQ(env["TUTTI_LOCAL_SIZE"], "2");
  EXPECT_EQ(env["TUTTI_CROSS_RANK"], "1");
  EXPECT_EQ(env["TUTTI_CROSS_SIZE"], "2");
  EXPECT_EQ(env["TUTTI_RENDEZVOUS_ADDR"], "127.0.0.1");
  EXPECT_EQ(env["TUTTI_RENDEZVOUS_PORT"], "4242");
  EXPECT_EQ(env["TUTTI_RENDEZVOUS_SERVER"], "external");
  EXPECT_EQ(env["TUTTI_SECRET"], "s3cr3t");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "2");  // 4 cores / 2 local ranks
  EXPECT_EQ(env["TUTTI_CYCLE_TIME_MS"], "2");
  EXPECT_EQ(env["HOME"], "/root");
  EXPECT_EQ(env.count("TUTTI_HOSTNAME"), 0u);
}

TEST(RankEnv, OmpThreadsAtLeastOneAndUserValueWins) {
  JobEnv job = sampleJob();
  RankPlacement p{0, "localhost", 0, 0, 8, 0, 1};
  EXPECT_EQ(rankEnvironment(p, 8, false, job)["OMP_NUM_THREADS"], "1");
  job.base["OMP_NUM_THREADS"] = "3";
  EXPECT_EQ(rankEnvironment(p, 8, false, job)["OMP_NUM_THREADS"], "3");
}

TEST(RankEnv, RemoteRankDropsHostSpecificVariables) {
  RankPlacement p{2, "w1", 1, 0, 2, 1, 2};
  EnvMap env = rankEnvironment(p, 4, true, sampleJob());
  EXPECT_EQ(env.count("HOME"), 0u);
  EXPECT_EQ(env.count("SSH_AUTH_SOCK"), 0u);
  EXPECT_EQ(env["MY_VAR"], "x");
  EXPECT_EQ(env["TUTTI_RENDEZVOUS_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["TUTTI_HOSTNAME"], "w1");
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);  // the remote host computes it
}

// FOO.BAR cannot be exported by a shell, so ssh ranks never get it: tuttirun
// says so, naming it, instead of dropping it without a word.
TEST(RankEnv, UnexportableNamesAreNamedInAWarning) {
  EnvMap base = {{"FOO.BAR", "1"}, {"MY_VAR", "x"}, {"2ND", "y"}};
  RankPlacement p{1, "w1", 0, 0, 1, 1, 2};
  JobEnv job = sampleJob();
  job.base = base;
  EXPECT_EQ(rankEnvironment(p, 2, true, job).count("FOO.BAR"), 0u);
  EXPECT_EQ(unexportableWarning(base),
            "not carried to ranks on other hosts (ssh): 2ND, FOO.BAR (a shell cannot export "
            "these names; use letters, digits and _)");
  EXPECT_EQ(unexportableWarning({{"MY_VAR", "x"}, {"_A1", "z"}}), "");
}

TEST(RankEnv, EnvFlags) {
  EnvMap from = {{"A", "1"}};
  EnvMap env;
  ASSERT_TRUE(applyEnvFlags({"A", "B=2", "C=x=y"}, from, &env).isOk());
  EXPECT_EQ(env["A"], "1");
  EXPECT_EQ(env["B"], "2");
  EXPECT_EQ(env["C"], "x=y");
  Status st = applyEnvFlags({"MISSING"}, from, &env);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("-x MISSING"), std::string::npos);
}

TEST(RankEnv, InheritedSettingsAreValidated) {
  EXPECT_TRUE(
      validateInheritedSettings({{"TUTTI_CYCLE_TIME_MS", "5"}, {"TUTTI_RANK", "x"}}).isOk());
  Status st = validateInheritedSettings({{"TUTTI_CYCLE_TIME_MS", "-5"}});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("TUTTI_CYCLE_TIME_MS=-5"), std::string::npos);
}

TEST(RankEnv, SecretIsRandomHex) {
  std::string a, b;
  ASSERT_TRUE(generateSecret(&a).isOk());
  ASSERT_TRUE(generateSecret(&b).isOk());
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

// Runs the remote bootstrap locally with `sh -c`, feeding the script on
// stdin, and returns what the command printed. Like ssh's stdin, the input
// stays open while the command runs (until it removes `running`): its end
// would make the bootstrap stop the command.
std::string runBootstrap(const EnvMap& env, const std::string& shell_command) {
  std::string path = "/tmp/tutti_bootstrap_test_" + std::to_string(::getpid());
  std::string running = path + ".running";
  {
    std::ofstream(running) << "";
    std::ofstream(path) << remoteScript(
        env, "/tmp",
        {"sh", "-c", shell_command + "; rm -f " + running, "arg0", "one arg; with $stuff"}, 2);
  }
  std::string cmd = "(cat " + path + "; while [ -e " + running +
                    " ]; do sleep 0.05; done) | sh -c '" + remoteBootstrap(1) + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  std::remove(path.c_str());
  std::remove(running.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return out;
}

TEST(Remote, ScriptCarriesEnvironmentCwdAndArgumentsExactly) {
  EnvMap env = {{"PLAIN", "v"}, {"QUOTES", "it's \"quoted\" $HOME `x`"}, {"LINES", "a\nb\n"}};
  std::string out = runBootstrap(env,
                                 "printf '%s|%s|%s|%s|%s|' \"$PLAIN\" \"$QUOTES\" \"$LINES\" "
                                 "\"$(pwd)\" \"$1\"; echo \"$OMP_NUM_THREADS\" | grep -c '^[1-9]'");
  EXPECT_EQ(out, "v|it's \"quoted\" $HOME `x`|a\nb\n|/tmp|one arg; with $stuff|1\n");
}

TEST(Remote, EndOfControlChannelStopsTheRank) {
  // tuttirun (and so ssh) gone: the bootstrap's stdin ends, the rank gets
  // SIGTERM and the bootstrap exits with 128+15 at once.
  std::string path = "/tmp/tutti_bootstrap_eof_" + std::to_string(::getpid());
  { std::ofstream(path) << remoteScript({}, "/tmp", {"sleep", "30"}, 1); }
  auto start = std::chrono::steady_clock::now();
  std::string cmd = "sh -c '" + remoteBootstrap(1) + "' < " + path;
  int status = std::system(cmd.c_str());
  std::remove(path.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(Remote, ForwardedInterruptReachesTheRank) {
  // "INT" on the control channel: the rank (a background job of the
  // bootstrap's non-interactive sh) must not start with SIGINT ignored, or a
  // forwarded Ctrl-C would do nothing and the rank would only die by SIGKILL
  // after the grace period. sleep dies by SIGINT: the bootstrap exits 130
  // (with INT ignored: 143, from the SIGTERM when the input ends 3 s later).
  std::string path = "/tmp/tutti_bootstrap_int_" + std::to_string(::getpid());
  { std::ofstream(path) << remoteScript({}, "/tmp", {"sleep", "30"}, 1); }
  auto start = std::chrono::steady_clock::now();
  std::string cmd =
      "(cat " + path + "; sleep 0.5; echo INT; sleep 3) | sh -c '" + remoteBootstrap(20) + "'";
  int status = std::system(cmd.c_str());
  std::remove(path.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGINT) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

TEST(Remote, SecretNeverOnTheSshCommandLine) {
  for (const auto& word : sshCommand("h", {2222, "/key"}, 5)) {
    EXPECT_EQ(word.find("s3cr3t"), std::string::npos);
  }
  auto argv = sshCommand("h", {2222, "/key"}, 5);
  EXPECT_EQ(argv[0], "ssh");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "2222"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "/key"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "BatchMode=yes"), argv.end());
}

TEST(Output, WholeLinesWithPrefixAndPartialLastLine) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    OutputStream s("[2]<stdout>: ", fds[1]);
    s.append("hel", 3);
    s.append("lo\nwor", 6);
    s.append("ld\n\nend", 7);
  }  // the destructor flushes "end"
  ::close(fds[1]);
  char buf[256];
  ssize_t n = ::read(fds[0], buf, sizeof(buf));
  ::close(fds[0]);
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0),
            "[2]<stdout>: hello\n[2]<stdout>: world\n[2]<stdout>: \n[2]<stdout>: end\n");
}

}  // namespace
}  // namespace launcher
}  // namespace tutti

// Elastic and --rsh-agent flags (launcher/cli.h), host discovery parsing and
// running (launcher/discovery.h), the rsh agent's argv (launcher/remote.h)
// and the environment of an elastic worker (launcher/rank_env.h).

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "launcher/cli.h"
#include "launcher/discovery.h"
#include "launcher/rank_env.h"
#include "launcher/remote.h"

namespace tutti {
namespace launcher {
namespace {

CliOutcome parse(std::vector<std::string> args, LaunchOptions* o) {
  args.push_back("./train");
  return parseCommandLine(args, EnvMap{}, o);
}

TEST(ElasticCli, FlagsAreParsed) {
  LaunchOptions o;
  CliOutcome out =
      parse({"-np", "4", "--min-np", "2", "--max-np", "8", "--host-discovery-script", "./d.sh",
             "--slots-per-host", "3", "--elastic-timeout", "2.5", "--reset-limit", "3",
             "--blacklist-cooldown-range", "1", "60", "--rsh-agent", "ip netns exec {host}"},
            &o);
  ASSERT_TRUE(out.run) << out.err;
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.np, 4);
  EXPECT_EQ(o.min_np, 2);
  EXPECT_EQ(o.max_np, 8);
  EXPECT_EQ(o.discovery_script, "./d.sh");
  EXPECT_EQ(o.slots_per_host, 3);
  EXPECT_EQ(o.elastic_timeout_seconds, 2.5);
  EXPECT_EQ(o.reset_limit, 3);
  EXPECT_EQ(o.cooldown_min_seconds, 1);
  EXPECT_EQ(o.cooldown_max_seconds, 60);
  EXPECT_EQ(o.rsh_agent_words, (std::vector<std::string>{"ip", "netns", "exec", "{host}"}));
  EXPECT_EQ(o.command, (std::vector<std::string>{"./train"}));
}

TEST(ElasticCli, DefaultsAndNonElasticJobs) {
  LaunchOptions o;
  ASSERT_TRUE(parse({"-np", "2"}, &o).run);
  EXPECT_FALSE(o.elastic());
  EXPECT_EQ(o.elastic_timeout_seconds, 600);
  EXPECT_EQ(o.reset_limit, -1);
  EXPECT_EQ(o.slots_per_host, 1);
  ASSERT_TRUE(parse({"--max-np", "3"}, &o).run);  // -np then defaults to --max-np
  EXPECT_TRUE(o.elastic());
  ASSERT_TRUE(parse({"--host-discovery-script", "./d.sh"}, &o).run);
  EXPECT_TRUE(o.elastic());
}

TEST(ElasticCli, BadValuesNameTheFlagAndWhatIsAccepted) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"-np", "4", "--min-np", "5"}, "--min-np 5 exceeds -np 4: expected min-np <= np"},
           {{"-np", "4", "--max-np", "3"}, "-np 4 exceeds --max-np 3: expected min-np <= np"},
           {{"--min-np", "3", "--max-np", "2"}, "--min-np 3 exceeds --max-np 2"},
           {{"-np", "2", "--min-np", "0"}, "--min-np 0: expected at least 1 worker"},
           {{"-np", "2", "--max-np", "-1"}, "--max-np -1: expected at least 1 worker"},
           {{"-np", "2", "--min-np", "1", "--elastic-timeout", "0"},
            "--elastic-timeout 0: expected a number of seconds in (0, 10000000]"},
           {{"-np", "2", "--min-np", "1", "--reset-limit", "-2"},
            "--reset-limit -2: expected an integer >= 0"},
           {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "5", "1"},
            "--blacklist-cooldown-range 5 1: expected MIN MAX seconds with 0 < MIN <= MAX"},
           {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "0", "1"},
            "--blacklist-cooldown-range 0 1: expected"},
           {{"-np", "2", "--host-discovery-script", "d", "--slots-per-host", "0"},
            "--slots-per-host 0: expected an integer in [1, 1048576]"},
           {{"-np", "2", "--min-np", "1", "--slots-per-host", "2"},
            "--slots-per-host applies to the hosts of --host-discovery-script"},
           {{"-np", "2", "--reset-limit", "1"},
            "--reset-limit applies to elastic jobs only: add --min-np, --max-np or "
            "--host-discovery-script"},
           {{"-np", "2", "--elastic-timeout", "5"}, "--elastic-timeout applies to elastic jobs"},
           {{"--host-discovery-script", "d", "-H", "a:2"},
            "--host-discovery-script and -H exclude each other"},
           {{"-np", "2", "--rsh-agent", "sh -c 'oops"},
            "--rsh-agent 'sh -c 'oops': unterminated '"},
           {{"-np", "2", "--rsh-agent", "  "}, "--rsh-agent '  ': empty command"},
           {{"-np", "2", "--rsh-agent", "agent", "-p", "2222"}, "--rsh-agent replaces ssh"},
           // One number: the command is not taken for MAX, the next flag neither.
           {{"--min-np", "1", "--host-discovery-script", "d", "--blacklist-cooldown-range", "5"},
            "--blacklist-cooldown-range takes two numbers, MIN MAX; got 5"},
           {{"--blacklist-cooldown-range", "5", "--min-np", "1"},
            "--blacklist-cooldown-range takes two numbers, MIN MAX; got 5"},
           {{"--min-np", "1", "--blacklist-cooldown-range", "x", "y"},
            "--blacklist-cooldown-range takes two numbers, MIN MAX; got none"},
           {{"-np", "2", "--min-np", "1", "--start-timeout", "5"},
            "--start-timeout applies to fixed-size jobs: elastic workers wait for each "
            "generation up to --elastic-timeout"},
       }) {
    LaunchOptions o;
    CliOutcome out = parse(c.args, &o);
    EXPECT_FALSE(out.run) << c.says;
    EXPECT_EQ(out.exit_code, kExitUsage) << c.says;
    EXPECT_NE(out.err.find(c.says), std::string::npos) << out.err;
  }
}

TEST(ElasticCli, HelpListsTheElasticFlags) {
  LaunchOptions o;
  CliOutcome out = parseCommandLine({"--help"}, EnvMap{}, &o);
  for (const char* flag :
       {"--min-np", "--max-np", "--host-discovery-script", "--slots-per-host", "--elastic-timeout",
        "--reset-limit", "--blacklist-cooldown-range", "--rsh-agent", "TUTTI_ELASTIC_WORKER_ID"}) {
    EXPECT_NE(out.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(out.out.find("elastic jobs: DIR/worker.<id>/"), std::string::npos) << out.out;
}

TEST(ShellWords, SplitsLikeAShell) {
  std::vector<std::string> w;
  ASSERT_TRUE(splitShellWords("  kubectl exec -i {host} -- ", &w).isOk());
  EXPECT_EQ(w, (std::vector<std::string>{"kubectl", "exec", "-i", "{host}", "--"}));
  ASSERT_TRUE(splitShellWords(R"(a 'b c' "d \"e\" \$f" g\ h '' x"y"z)", &w).isOk());
  EXPECT_EQ(w, (std::vector<std::string>{"a", "b c", "d \"e\" $f", "g h", "", "xyz"}));
  EXPECT_FALSE(splitShellWords("a \"b", &w).isOk());
  EXPECT_FALSE(splitShellWords("a\\", &w).isOk());
}

TEST(RshAgent, HostReplacedOrAppendedThenTheBootstrap) {
  auto argv = rshAgentCommand({"ip", "netns", "exec", "{host}"}, "ns1", 5);
  ASSERT_EQ(argv.size(), 7u);
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + 6),
            (std::vector<std::string>{"ip", "netns", "exec", "ns1", "sh", "-c"}));
  EXPECT_EQ(argv[6], remoteBootstrap(5));
  argv = rshAgentCommand({"env", "H={host}.x{host}"}, "h2", 5);
  EXPECT_EQ(argv[1], "H=h2.xh2");
  EXPECT_EQ(argv[2], "sh");
  argv = rshAgentCommand({"kubectl", "exec", "-i"}, "pod-3", 5);  // no {host}: appended
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + 6),
            (std::vector<std::string>{"kubectl", "exec", "-i", "pod-3", "sh", "-c"}));
}

TEST(WorkerEnvironment, WorkerIdInsteadOfPlacement) {
  JobEnv job;
  job.base = {
      {"PATH", "/bin"}, {"TUTTI_RANK", "7"}, {"TUTTI_ELASTIC_WORKER_ID", "99"}, {"HOME", "/root"}};
  job.secret = "s3cret";
  job.rendezvous_port = 4242;
  job.remote_rendezvous_addr = "10.0.0.1";
  job.cores = 8;
  EnvMap env = workerEnvironment(5, "2.5", "localhost", 2, false, job);
  EXPECT_EQ(env["TUTTI_ELASTIC_WORKER_ID"], "5");
  EXPECT_EQ(env["TUTTI_ELASTIC_TIMEOUT_SECONDS"], "2.5");
  EXPECT_EQ(env["TUTTI_SECRET"], "s3cret");
  EXPECT_EQ(env["TUTTI_RENDEZVOUS_ADDR"], "127.0.0.1");
  EXPECT_EQ(env["TUTTI_RENDEZVOUS_PORT"], "4242");
  EXPECT_EQ(env["TUTTI_RENDEZVOUS_SERVER"], "external");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4");
  for (const char* var : {"TUTTI_RANK", "TUTTI_SIZE", "TUTTI_LOCAL_RANK", "TUTTI_LOCAL_SIZE",
                          "TUTTI_CROSS_RANK", "TUTTI_CROSS_SIZE", "TUTTI_HOSTNAME"}) {
    EXPECT_EQ(env.count(var), 0u) << var;
  }
  EnvMap remote = workerEnvironment(6, "600", "h1", 2, true, job);
  EXPECT_EQ(remote["TUTTI_HOSTNAME"], "h1");
  EXPECT_EQ(remote["TUTTI_RENDEZVOUS_ADDR"], "10.0.0.1");
  EXPECT_EQ(remote.count("HOME"), 0u);
  job.remote_hostname = false;  // --rsh-agent
  EXPECT_EQ(workerEnvironment(6, "600", "h1", 2, true, job).count("TUTTI_HOSTNAME"), 0u);
  RankPlacement p{1, "h1", 0, 1, 2, 0, 1};
  EXPECT_EQ(rankEnvironment(p, 2, true, job).count("TUTTI_HOSTNAME"), 0u);
  EXPECT_EQ(rankEnvironment(p, 2, true, job).count("TUTTI_ELASTIC_WORKER_ID"), 0u);
}

TEST(Discovery, ParsesHostsSlotsAndComments) {
  std::vector<HostSlots> h;
  ASSERT_TRUE(
      parseDiscoveryOutput("# cluster\nh1:4\n  h2  # two\n\nh1:2\n10.0.0.3:1\n", 2, &h).isOk());
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].host, "h1");
  EXPECT_EQ(h[0].slots, 6);
  EXPECT_EQ(h[1].host, "h2");
  EXPECT_EQ(h[1].slots, 2);  // --slots-per-host
  EXPECT_EQ(h[2].host, "10.0.0.3");
  EXPECT_EQ(h[2].slots, 1);
  ASSERT_TRUE(parseDiscoveryOutput("# none now\n", 1, &h).isOk());
  EXPECT_TRUE(h.empty());
  Status st = parseDiscoveryOutput("h1:2\nh2:x\n", 1, &h);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.message().rfind("line 2: bad entry 'h2:x': expected host:slots", 0), 0u)
      << st.message();
  st = parseDiscoveryOutput("h1 h2\n", 1, &h);
  ASSERT_FALSE(st.isOk());
  // A discovery line's syntax, not -H's ("a:2,b:2").
  EXPECT_EQ(st.message(),
            "line 1: bad entry 'h1 h2': expected 'host' or 'host:slots', one per line (for "
            "example h1 or h1:4)");
}

TEST(Discovery, AFailingScriptIsLoggedWhenItStartsChangesRecoversAndOnceAMinute) {
  using Clock = std::chrono::steady_clock;
  auto at = [](double s) {
    static const Clock::time_point t0 = Clock::now();
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  DiscoveryFailureLog log;
  const Status broken = Status::ioError("d.sh exited with code 1");
  EXPECT_EQ(log.onResult(Status::ok(), at(0)), "");
  EXPECT_EQ(log.onResult(broken, at(1)),
            "elastic: host discovery failed, keeping the last list: d.sh exited with code 1");
  for (int t = 2; t < 61; ++t) EXPECT_EQ(log.onResult(broken, at(t)), "") << t;
  EXPECT_EQ(log.onResult(broken, at(61)),
            "elastic: host discovery still failing (for 60 s), keeping the last list: d.sh "
            "exited with code 1");
  EXPECT_EQ(log.onResult(broken, at(62)), "");
  EXPECT_EQ(log.onResult(Status::ioError("d.sh exited with code 2"), at(63)),
            "elastic: host discovery failed, keeping the last list: d.sh exited with code 2");
  EXPECT_EQ(log.onResult(Status::ok(), at(64)),
            "elastic: host discovery works again (it failed for 63 s)");
  EXPECT_EQ(log.onResult(Status::ok(), at(65)), "");
}

class DiscoveryScript : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tutti-discovery-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string script(const std::string& body) {
    std::string path = dir_ + "/d" + std::to_string(n_++) + ".sh";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    return path;
  }
  std::string dir_;
  int n_ = 0;
};

TEST_F(DiscoveryScript, RunsAndParses) {
  std::vector<HostSlots> h;
  Status st = runDiscoveryScript(script("echo h1:2; echo h2"), 3, 10, &h);
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].host, "h2");
  EXPECT_EQ(h[1].slots, 3);
}

TEST_F(DiscoveryScript, FailuresSayWhatHappenedWithTheScriptsStderr) {
  std::vector<HostSlots> h;
  std::string s = script("echo 'no cluster today' >&2; exit 3");
  Status st = runDiscoveryScript(s, 1, 10, &h);
  EXPECT_EQ(st.message(),
            "--host-discovery-script " + s + " exited with code 3 (stderr: no cluster today)");
  s = script("echo 'h1:zero'");
  st = runDiscoveryScript(s, 1, 10, &h);
  EXPECT_EQ(st.message().rfind("--host-discovery-script " + s + " printed line 1: bad entry", 0),
            0u)
      << st.message();
  st = runDiscoveryScript(dir_ + "/missing.sh", 1, 10, &h);
  EXPECT_NE(st.message().find("cannot run '" + dir_ + "/missing.sh'"), std::string::npos)
      << st.message();
  s = script("sleep 30");
  auto t0 = std::chrono::steady_clock::now();
  st = runDiscoveryScript(s, 1, 0.3, &h);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_NE(st.message().find("did not finish within 0.3 s"), std::string::npos) << st.message();
}

// A bare name is a path in the working directory (as Horovod's), not a
// command on PATH.
TEST_F(DiscoveryScript, ABareNameRunsFromTheWorkingDirectory) {
  std::string s = script("echo h7:2");
  std::string name = s.substr(s.rfind('/') + 1);
  char old_cwd[4096];
  ASSERT_NE(::getcwd(old_cwd, sizeof(old_cwd)), nullptr);
  ASSERT_EQ(::chdir(dir_.c_str()), 0);
  std::vector<HostSlots> h;
  Status st = runDiscoveryScript(name, 1, 10, &h);
  ASSERT_EQ(::chdir(old_cwd), 0);
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].host, "h7");
}

TEST_F(DiscoveryScript, PollerDeliversNewResults) {
  std::string list = dir_ + "/hosts";
  std::ofstream(list) << "h1:1\n";
  DiscoveryPoller poller(script("cat " + list), 1, 0.05, 5);
  poller.start();
  Status st;
  std::vector<HostSlots> h;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!poller.take(&st, &h) && std::chrono::steady_clock::now() < deadline) ::usleep(10000);
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(h.size(), 1u);
  std::ofstream(list) << "h1:1\nh2:4\n";
  do {
    while (!poller.take(&st, &h) && std::chrono::steady_clock::now() < deadline) ::usleep(10000);
  } while (h.size() < 2 && std::chrono::steady_clock::now() < deadline);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].slots, 4);
}

}  // namespace
}  // namespace launcher
}  // namespace tutti

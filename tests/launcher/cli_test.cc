#include "launcher/cli.h"

#include <gtest/gtest.h>

#include <optional>

#include "core/settings.h"
#include "tutti/config.h"

namespace tutti {
namespace launcher {
namespace {

// An empty environment: the results do not depend on the test's own.
CliOutcome parse(const std::vector<std::string>& args, LaunchOptions* o) {
  return parseCommandLine(args, EnvMap{}, o);
}

std::string settingOf(const LaunchOptions& o, const std::string& name) {
  for (const auto& [k, v] : o.settings) {
    if (k == name) return v;
  }
  return "<unset>";
}

TEST(SettingFlags, FusionThresholdInMegabytes) {
  std::pair<std::string, std::string> s;
  ASSERT_TRUE(settingFromFlag("--fusion-threshold-mb", "10", &s).isOk());
  EXPECT_EQ(s.first, "TUTTI_FUSION_THRESHOLD_BYTES");
  EXPECT_EQ(s.second, "10485760");
  ASSERT_TRUE(settingFromFlag("--fusion-threshold-mb", "0.5", &s).isOk());
  EXPECT_EQ(s.second, "524288");
  ASSERT_TRUE(settingFromFlag("--fusion-threshold-mb", "0", &s).isOk());
  EXPECT_EQ(s.second, "0");
}

// Fractions of a millisecond pass through unrounded (the transport keeps
// sub-millisecond deadlines: tests/ops/tcp_transport_test.cc).
TEST(SettingFlags, CycleTimeKeepsFractionsOfAMillisecond) {
  std::pair<std::string, std::string> s;
  ASSERT_TRUE(settingFromFlag("--cycle-time-ms", "0.1", &s).isOk());
  EXPECT_EQ(s.first, "TUTTI_CYCLE_TIME_MS");
  EXPECT_EQ(s.second, "0.1");
  Settings loaded;
  ASSERT_TRUE(loadSettings(
                  [&](const std::string& name) -> std::optional<std::string> {
                    if (name == s.first) return s.second;
                    return std::nullopt;
                  },
                  &loaded)
                  .isOk());
  EXPECT_DOUBLE_EQ(loaded.cycle_time_ms, 0.1);
}

TEST(SettingFlags, EveryFlagMapsOntoARegisteredSetting) {
  const std::pair<const char*, const char*> expected[] = {
      {"--cycle-time-ms", "TUTTI_CYCLE_TIME_MS"},
      {"--cache-capacity", "TUTTI_CACHE_CAPACITY"},
      {"--timeout-seconds", "TUTTI_TIMEOUT_SECONDS"},
      {"--stall-check-warning-time-seconds", "TUTTI_STALL_CHECK_TIME_SECONDS"},
      {"--stall-check-shutdown-time-seconds", "TUTTI_STALL_SHUTDOWN_TIME_SECONDS"},
      {"--backend", "TUTTI_BACKEND"},
      {"--log-level", "TUTTI_LOG_LEVEL"},
      {"--compression", "TUTTI_COMPRESSION"},
      {"--compression-zstd-level", "TUTTI_COMPRESSION_ZSTD_LEVEL"},
      {"--timeline-filename", "TUTTI_TIMELINE"},
      {"--autotune-log-file", "TUTTI_AUTOTUNE_LOG"},
      {"--autotune-warmup-samples", "TUTTI_AUTOTUNE_WARMUP_SAMPLES"},
      {"--autotune-steps-per-sample", "TUTTI_AUTOTUNE_STEPS_PER_SAMPLE"},
      {"--autotune-bayes-opt-max-samples", "TUTTI_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"},
      {"--autotune-gaussian-process-noise", "TUTTI_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"},
  };
  const char* values[] = {"5", "100",     "12.5",   "30", "0", "tcp", "debug", "topk:0.01",
                          "3", "tl.json", "at.csv", "2",  "4", "12",  "0.5"};
  for (size_t i = 0; i < std::size(expected); ++i) {
    std::pair<std::string, std::string> s;
    Status st = settingFromFlag(expected[i].first, values[i], &s);
    ASSERT_TRUE(st.isOk()) << expected[i].first << ": " << st.toString();
    EXPECT_EQ(s.first, expected[i].second);
    EXPECT_EQ(s.second, values[i]);
  }
  EXPECT_EQ(settingFlags().size(), std::size(expected) + 1);
}

TEST(SettingFlags, BadValuesNameTheFlagAndTheRange) {
  struct Case {
    const char* flag;
    const char* value;
    const char* range;
  };
  for (const Case& c :
       {Case{"--fusion-threshold-mb", "-1", "[0, "}, Case{"--fusion-threshold-mb", "ten", "[0, "},
        Case{"--cycle-time-ms", "-1", "[0, 10000]"}, Case{"--cycle-time-ms", "20000", "[0, 10000]"},
        Case{"--cache-capacity", "1.5", "an integer"}, Case{"--timeout-seconds", "0", "[0.001, "},
        Case{"--backend", "gloo", "{auto,tcp,mpi,nccl}"},
        Case{"--log-level", "loud", "{trace,debug,info,warning,error}"},
        Case{"--compression", "gzip", "accepted: none, fp16, bf16, fp16:cross_host, bf16:cross_host, topk:"},
        Case{"--compression", "topk:2", "accepted: none, fp16, bf16, fp16:cross_host, bf16:cross_host, topk:"},
        Case{"--compression-zstd-level", "20", "[0, 19]"}}) {
    std::pair<std::string, std::string> s;
    Status st = settingFromFlag(c.flag, c.value, &s);
    ASSERT_FALSE(st.isOk()) << c.flag << " " << c.value;
    EXPECT_EQ(st.message().rfind(std::string(c.flag) + " " + c.value + ": expected", 0), 0u)
        << st.message();
    EXPECT_NE(st.message().find(c.range), std::string::npos) << st.message();
  }
}

TEST(CommandLine, NpHostsSettingsAndCommand) {
  LaunchOptions o;
  CliOutcome r =
      parse({"-np", "4", "-H", "a:2,b:2", "--fusion-threshold-mb", "10", "-x", "FOO", "-x", "BAR=1",
             "--start-timeout", "5", "python3", "-u", "train.py", "-np", "2"},
            &o);
  ASSERT_TRUE(r.run) << r.err;
  EXPECT_EQ(o.np, 4);
  EXPECT_EQ(o.hosts, "a:2,b:2");
  EXPECT_EQ(o.env_flags, (std::vector<std::string>{"FOO", "BAR=1"}));
  EXPECT_EQ(o.start_timeout_seconds, 5);
  EXPECT_EQ(settingOf(o, "TUTTI_FUSION_THRESHOLD_BYTES"), "10485760");
  // The command's own flags stay the command's.
  EXPECT_EQ(o.command, (std::vector<std::string>{"python3", "-u", "train.py", "-np", "2"}));
}

TEST(CommandLine, TimelineFlags) {
  LaunchOptions o;
  ASSERT_TRUE(
      parse({"-np", "2", "--timeline-filename", "/tmp/t.json", "--timeline-mark-cycles", "./a.out"},
            &o)
          .run);
  EXPECT_EQ(settingOf(o, "TUTTI_TIMELINE"), "/tmp/t.json");
  EXPECT_EQ(settingOf(o, "TUTTI_TIMELINE_MARK_CYCLES"), "1");
  EXPECT_EQ(o.command, std::vector<std::string>{"./a.out"});
}

TEST(CommandLine, HierarchicalAllreduceFlag) {
  LaunchOptions o;
  ASSERT_TRUE(
      parse({"-np", "4", "--hierarchical-allreduce", "--hierarchical-allgather", "./a.out"}, &o)
          .run);
  EXPECT_EQ(settingOf(o, "TUTTI_HIERARCHICAL_ALLREDUCE"), "1");
  EXPECT_EQ(settingOf(o, "TUTTI_HIERARCHICAL_ALLGATHER"), "1");
  LaunchOptions plain;
  ASSERT_TRUE(parse({"-np", "4", "./a.out"}, &plain).run);
  EXPECT_EQ(settingOf(plain, "TUTTI_HIERARCHICAL_ALLREDUCE"), "<unset>");
  EXPECT_EQ(o.command, std::vector<std::string>{"./a.out"});
}

// horovodrun's autotune flags, as TUTTI_AUTOTUNE* variables; bad values are
// refused with the range.
TEST(CommandLine, AutotuneFlags) {
  LaunchOptions o;
  ASSERT_TRUE(parse({"-np", "2", "--autotune", "--autotune-log-file", "/tmp/at.csv",
                     "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "4",
                     "--autotune-bayes-opt-max-samples", "12", "--autotune-gaussian-process-noise",
                     "0.5", "./a.out"},
                    &o)
                  .run);
  EXPECT_EQ(settingOf(o, "TUTTI_AUTOTUNE"), "1");
  EXPECT_EQ(settingOf(o, "TUTTI_AUTOTUNE_LOG"), "/tmp/at.csv");
  EXPECT_EQ(settingOf(o, "TUTTI_AUTOTUNE_WARMUP_SAMPLES"), "1");
  EXPECT_EQ(settingOf(o, "TUTTI_AUTOTUNE_STEPS_PER_SAMPLE"), "4");
  EXPECT_EQ(settingOf(o, "TUTTI_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"), "12");
  EXPECT_EQ(settingOf(o, "TUTTI_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"), "0.5");
  LaunchOptions plain;
  ASSERT_TRUE(parse({"-np", "2", "./a.out"}, &plain).run);
  EXPECT_EQ(settingOf(plain, "TUTTI_AUTOTUNE"), "<unset>");
  LaunchOptions bad;
  CliOutcome r = parse({"-np", "2", "--autotune-steps-per-sample", "0", "./a.out"}, &bad);
  EXPECT_FALSE(r.run);
  EXPECT_NE(r.err.find("--autotune-steps-per-sample 0: expected an integer in [1, 1000000]"),
            std::string::npos)
      << r.err;
}

TEST(CommandLine, HorovodCompatRunsTheScriptThroughTheAlias) {
  using V = std::vector<std::string>;
  LaunchOptions o;
  CliOutcome r = parse({"-np", "2", "--horovod-compat", "python3", "-u", "-W", "ignore", "train.py",
                        "--epochs", "1"},
                       &o);
  ASSERT_TRUE(r.run) << r.err;
  EXPECT_TRUE(o.horovod_compat);
  EXPECT_EQ(o.command, (V{"python3", "-u", "-W", "ignore", "-m", "tutti.horovod_compat", "train.py",
                          "--epochs", "1"}));
  LaunchOptions m;
  ASSERT_TRUE(
      parse({"-np", "2", "--horovod-compat", "/usr/bin/python3.11", "-m", "pkg.train", "-x"}, &m)
          .run);
  EXPECT_EQ(m.command,
            (V{"/usr/bin/python3.11", "-m", "tutti.horovod_compat", "-m", "pkg.train", "-x"}));
  LaunchOptions plain;
  ASSERT_TRUE(parse({"-np", "2", "python3", "train.py"}, &plain).run);
  EXPECT_EQ(plain.command, (V{"python3", "train.py"}));  // not without the flag
  for (const V& bad : {V{"./train.sh"}, V{"python3", "-c", "print(1)"}, V{"python3", "-u"}}) {
    V args = {"-np", "2", "--horovod-compat"};
    args.insert(args.end(), bad.begin(), bad.end());
    LaunchOptions b;
    CliOutcome e = parse(args, &b);
    EXPECT_FALSE(e.run) << bad[0];
    EXPECT_EQ(e.exit_code, kExitUsage);
    EXPECT_NE(e.err.find("--horovod-compat"), std::string::npos) << e.err;
    EXPECT_NE(e.err.find("python3 [options] script.py"), std::string::npos) << e.err;
  }
}

TEST(CommandLine, DoubleDashEndsOptions) {
  LaunchOptions o;
  CliOutcome r = parse({"--np=2", "--verbose", "--", "-weird-program", "x"}, &o);
  ASSERT_TRUE(r.run) << r.err;
  EXPECT_EQ(o.np, 2);
  EXPECT_TRUE(o.verbose);
  EXPECT_EQ(o.command, (std::vector<std::string>{"-weird-program", "x"}));
}

TEST(CommandLine, SshOptions) {
  LaunchOptions o;
  CliOutcome r = parse({"-np", "4", "-H", "h1:2,h2:2", "-p", "2222", "-i", "/k", "hostname"}, &o);
  ASSERT_TRUE(r.run) << r.err;
  EXPECT_EQ(o.ssh_port, 2222);
  EXPECT_EQ(o.ssh_identity, "/k");
}

TEST(CommandLine, Errors) {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Case& c : {Case{{"-np", "0", "x"}, "-np 0"}, Case{{"-np", "two", "x"}, "np"},
                        Case{{"x"}, "-np is required"}, Case{{"-np", "2"}, "no command"},
                        Case{{"-np", "2", "--cycle-time-ms", "-5", "x"}, "--cycle-time-ms -5"},
                        Case{{"-np", "2", "--start-timeout", "-1", "x"}, "--start-timeout"},
                        Case{{"-np", "2", "-p", "70000", "x"}, "-p 70000"},
                        Case{{"-np", "2", "-x", "1A=b", "x"}, "-x 1A=b"},
                        Case{{"-np", "2", "--bogus", "x"}, "--bogus"},
                        Case{{"-H", "a:1", "--hostfile", "f", "x"}, "exclude"}}) {
    LaunchOptions o;
    CliOutcome r = parse(c.args, &o);
    EXPECT_FALSE(r.run) << c.says;
    EXPECT_EQ(r.exit_code, kExitUsage) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

TEST(CommandLine, MpiNeedsTheMpiBackend) {
  LaunchOptions o;
  CliOutcome r = parse({"-np", "2", "--mpi", "x"}, &o);
  if (TUTTI_BUILT_MPI) {
    EXPECT_TRUE(r.run) << r.err;
    EXPECT_TRUE(o.mpi);
  } else {
    EXPECT_FALSE(r.run);
    EXPECT_EQ(r.exit_code, kExitUsage);
    EXPECT_NE(r.err.find("this build has no MPI backend"), std::string::npos) << r.err;
  }
}

TEST(CommandLine, HelpVersionCheckBuild) {
  LaunchOptions o;
  CliOutcome help = parse({"--help"}, &o);
  EXPECT_FALSE(help.run);
  EXPECT_EQ(help.exit_code, 0);
  for (const char* s :
       {"-np", "--hostfile", "--fusion-threshold-mb", "--start-timeout", "--output-filename",
        "--network-interface", "--check-build", "Exit codes", "128+N"}) {
    EXPECT_NE(help.out.find(s), std::string::npos) << s;
  }
  CliOutcome version = parse({"--version"}, &o);
  EXPECT_NE(version.out.find("tuttirun (tutti)"), std::string::npos);
  CliOutcome build = parse({"--check-build"}, &o);
  EXPECT_NE(build.out.find("[X] tcp"), std::string::npos) << build.out;
  EXPECT_NE(build.out.find(TUTTI_BUILT_MPI ? "[X] mpi" : "[ ] mpi"), std::string::npos)
      << build.out;
  EXPECT_NE(build.out.find(TUTTI_BUILT_NCCL ? "[X] nccl" : "[ ] nccl"), std::string::npos)
      << build.out;
  EXPECT_NE(build.out.find(TUTTI_BUILT_CUDA ? "[X] cuda" : "[ ] cuda"), std::string::npos)
      << build.out;
  // The algorithm table, with default ranges (ops/algorithm_table.h).
  EXPECT_NE(build.out.find("allreduce:0-64k:recursive_doubling"), std::string::npos) << build.out;
  EXPECT_NE(build.out.find("broadcast:0-64k:binomial"), std::string::npos) << build.out;
  EXPECT_NE(build.out.find("TUTTI_ALGORITHMS"), std::string::npos) << build.out;
}

// The environment is an argument: TUTTI_BACKEND and an allocation are read
// from the snapshot passed, never from the process.
TEST(CommandLine, ReadsTheEnvironmentSnapshotItIsGiven) {
  LaunchOptions o;
  CliOutcome r = parseCommandLine({"-np", "2", "x"}, EnvMap{{"TUTTI_BACKEND", "mpi"}}, &o);
  EXPECT_FALSE(r.run);
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_NE(r.err.find("TUTTI_BACKEND=mpi: the mpi backend runs under Open MPI's mpirun"),
            std::string::npos)
      << r.err;
  // --backend on the command line wins over the environment's.
  r = parseCommandLine({"-np", "2", "--backend", "tcp", "x"}, EnvMap{{"TUTTI_BACKEND", "mpi"}}, &o);
  EXPECT_TRUE(r.run) << r.err;
  EXPECT_EQ(settingOf(o, "TUTTI_BACKEND"), "tcp");
  r = parseCommandLine({"-np", "2", "--backend", "mpi", "x"}, EnvMap{}, &o);
  EXPECT_NE(r.err.find("--backend mpi: the mpi backend"), std::string::npos) << r.err;

  // Without -np: an allocation in the snapshot gives the ranks; without one
  // -np is required.
  r = parseCommandLine({"x"}, EnvMap{{"SLURM_JOB_NODELIST", "n[1-2]"}}, &o);
  EXPECT_TRUE(r.run) << r.err;
  EXPECT_EQ(o.np, 0);
  EXPECT_EQ(o.command, std::vector<std::string>{"x"});
  r = parseCommandLine({"x"}, EnvMap{{"OMPI_MCA_orte_default_hostfile", "/h"}}, &o);
  EXPECT_TRUE(r.run) << r.err;
  r = parseCommandLine({"x"}, EnvMap{{"SLURM_JOB_NODELIST", ""}}, &o);
  EXPECT_FALSE(r.run);
  EXPECT_NE(r.err.find("-np is required"), std::string::npos) << r.err;
}

// Options that take several numbers take only numbers, so that a missing one
// neither swallows the command nor the next option.
TEST(CommandLine, SeveralNumbersTakeOnlyNumbers) {
  LaunchOptions o;
  CliOutcome r = parse({"-np", "2", "--blacklist-cooldown-range", "5", "./train"}, &o);
  EXPECT_FALSE(r.run);
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_NE(r.err.find("--blacklist-cooldown-range takes two numbers, MIN MAX; got 5"),
            std::string::npos)
      << r.err;
  r = parse({"-np", "2", "--blacklist-cooldown-range", "--verbose", "./train"}, &o);
  EXPECT_NE(r.err.find("got none"), std::string::npos) << r.err;
  r = parse({"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "5", "60", "./train", "7"},
            &o);
  ASSERT_TRUE(r.run) << r.err;
  EXPECT_EQ(o.cooldown_min_seconds, 5);
  EXPECT_EQ(o.cooldown_max_seconds, 60);
  EXPECT_EQ(o.command, (std::vector<std::string>{"./train", "7"}));
}

}  // namespace
}  // namespace launcher
}  // namespace tutti

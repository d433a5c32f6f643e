// planJob (launcher/run_job.h): hosts, placement, the ranks' shared
// environment and the rendezvous address, from options and an environment
// snapshot, without starting anything.

#include "launcher/run_job.h"

#include <gtest/gtest.h>

namespace tutti {
namespace launcher {
namespace {

TEST(PlanJob, PlacesRanksAndBuildsTheirEnvironment) {
  LaunchOptions o;
  o.np = 4;
  o.hosts = "localhost:2,127.0.0.2:2";
  o.env_flags = {"FOO", "BAR=1"};
  o.settings = {{"TUTTI_CYCLE_TIME_MS", "5"}};
  o.command = {"./a.out"};
  JobPlan plan;
  Status error;
  ASSERT_EQ(planJob(o, {{"FOO", "x"}, {"PATH", "/bin"}}, &plan, &error), kExitOk)
      << error.toString();
  EXPECT_EQ(plan.np, 4);
  ASSERT_EQ(plan.placement.size(), 4u);
  EXPECT_EQ(plan.placement[2].host, "127.0.0.2");
  EXPECT_EQ(plan.placement[2].local_rank, 0);
  EXPECT_EQ(plan.placement[3].cross_rank, 1);
  // 127.0.0.2 is another host on loopback: remote, reached at 127.0.0.1.
  EXPECT_EQ(plan.remote, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(plan.job.remote_rendezvous_addr, "127.0.0.1");
  EXPECT_EQ(plan.job.local_hostname, "");
  EXPECT_TRUE(plan.job.remote_hostname);
  EXPECT_EQ(plan.job.base.at("FOO"), "x");
  EXPECT_EQ(plan.job.base.at("BAR"), "1");
  EXPECT_EQ(plan.job.base.at("PATH"), "/bin");
  EXPECT_EQ(plan.job.base.at("TUTTI_CYCLE_TIME_MS"), "5");
  EXPECT_GE(plan.job.cores, 1);
}

TEST(PlanJob, HostsFromAnAllocationElseLocalhost) {
  LaunchOptions o;
  o.command = {"./a.out"};
  JobPlan plan;
  Status error;
  EnvMap slurm = {{"SLURM_JOB_NODELIST", "localhost"}, {"SLURM_TASKS_PER_NODE", "3"}};
  ASSERT_EQ(planJob(o, slurm, &plan, &error), kExitOk) << error.toString();
  ASSERT_EQ(plan.hosts.size(), 1u);
  EXPECT_EQ(plan.hosts[0].host, "localhost");
  EXPECT_EQ(plan.hosts[0].slots, 3);
  EXPECT_EQ(plan.np, 3);  // no -np: the allocation's slots

  JobPlan local;
  o.np = 2;
  ASSERT_EQ(planJob(o, {}, &local, &error), kExitOk) << error.toString();
  ASSERT_EQ(local.hosts.size(), 1u);
  EXPECT_EQ(local.hosts[0].host, "localhost");
  EXPECT_EQ(local.hosts[0].slots, 2);
  EXPECT_EQ(local.placement.size(), 2u);
}

TEST(PlanJob, ElasticJobsPlaceHostsNotRanks) {
  LaunchOptions o;
  o.np = 2;
  o.min_np = 1;
  o.hosts = "localhost:3";
  o.command = {"./a.out"};
  JobPlan plan;
  Status error;
  ASSERT_EQ(planJob(o, {}, &plan, &error), kExitOk) << error.toString();
  ASSERT_EQ(plan.placement.size(), 1u);
  EXPECT_EQ(plan.placement[0].host, "localhost");
  EXPECT_EQ(plan.placement[0].local_size, 3);
}

TEST(PlanJob, ErrorsCarryTuttirunsExitCode) {
  struct Case {
    LaunchOptions o;
    EnvMap env;
    int code;
    const char* says;
  };
  auto opts = [](int np, const std::string& hosts) {
    LaunchOptions o;
    o.np = np;
    o.hosts = hosts;
    o.command = {"./a.out"};
    return o;
  };
  LaunchOptions unset_var = opts(2, "localhost:2");
  unset_var.env_flags = {"TUTTI_TEST_UNSET_VAR"};
  LaunchOptions discovery = opts(2, "");
  discovery.discovery_script = "/nonexistent/tutti-discovery-script";
  for (const Case& c : {Case{opts(5, "localhost:2"), {}, kExitUsage, "5"},
                        Case{opts(2, "a:b"), {}, kExitUsage, "a:b"},
                        Case{unset_var, {}, kExitUsage, "TUTTI_TEST_UNSET_VAR"},
                        Case{opts(2, "localhost:2"),
                             {{"TUTTI_CYCLE_TIME_MS", "-1"}},
                             kExitUsage,
                             "TUTTI_CYCLE_TIME_MS=-1"},
                        Case{discovery, {}, kExitStartFailed, "the first host discovery failed"}}) {
    JobPlan plan;
    Status error;
    EXPECT_EQ(planJob(c.o, c.env, &plan, &error), c.code) << c.says;
    EXPECT_NE(error.message().find(c.says), std::string::npos) << error.message();
  }
}

}  // namespace
}  // namespace launcher
}  // namespace tutti

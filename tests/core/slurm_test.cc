// Slurm's hostlist and tasks-per-node forms, and the placement loadSettings
// takes from srun's variables (core/slurm.h). Expected values are written out
// by hand from Slurm's documented syntax.

#include "core/slurm.h"

#include <gtest/gtest.h>

#include <map>

namespace tutti {
namespace {

std::vector<std::string> hosts(const std::string& list) {
  std::vector<std::string> out;
  Status st = expandHostlist(list, &out);
  EXPECT_TRUE(st.isOk()) << list << ": " << st.message();
  return out;
}

std::string hostlistError(const std::string& list) {
  std::vector<std::string> out;
  Status st = expandHostlist(list, &out);
  EXPECT_FALSE(st.isOk()) << list;
  return st.message();
}

TEST(SlurmHostlist, PlainNames) {
  EXPECT_EQ(hosts("node1"), (std::vector<std::string>{"node1"}));
  EXPECT_EQ(hosts("a,b.example.org,c-1"), (std::vector<std::string>{"a", "b.example.org", "c-1"}));
}

TEST(SlurmHostlist, RangesAndSingles) {
  EXPECT_EQ(hosts("gnode[10,20-25],other"),
            (std::vector<std::string>{"gnode10", "gnode20", "gnode21", "gnode22", "gnode23",
                                      "gnode24", "gnode25", "other"}));
  EXPECT_EQ(hosts("n[3]"), (std::vector<std::string>{"n3"}));
}

TEST(SlurmHostlist, ZeroPaddingFollowsTheLowerBound) {
  EXPECT_EQ(hosts("gpu[08-11]"), (std::vector<std::string>{"gpu08", "gpu09", "gpu10", "gpu11"}));
  EXPECT_EQ(hosts("n[098-101]"), (std::vector<std::string>{"n098", "n099", "n100", "n101"}));
}

TEST(SlurmHostlist, SeveralGroupsAndSuffixes) {
  EXPECT_EQ(hosts("rack[1-2]-n[1,3].ib"),
            (std::vector<std::string>{"rack1-n1.ib", "rack1-n3.ib", "rack2-n1.ib", "rack2-n3.ib"}));
  EXPECT_EQ(hosts("a[1-2],b,c[7]"), (std::vector<std::string>{"a1", "a2", "b", "c7"}));
}

TEST(SlurmHostlist, ErrorsNameTheProblem) {
  EXPECT_NE(hostlistError("n[1-3").find("unbalanced '['"), std::string::npos);
  EXPECT_NE(hostlistError("n1-3]").find("unbalanced ']'"), std::string::npos);
  EXPECT_NE(hostlistError("a,,b").find("empty host name"), std::string::npos);
  EXPECT_NE(hostlistError("").find("empty host name"), std::string::npos);
  EXPECT_NE(hostlistError("n[5-2]").find("ends below its start"), std::string::npos);
  EXPECT_NE(hostlistError("n[a-b]").find("bad range 'a-b'"), std::string::npos);
  EXPECT_NE(hostlistError("n[1,]").find("bad range ''"), std::string::npos);
  EXPECT_NE(hostlistError("n[0-9999999]").find("more than 1048576"), std::string::npos);
}

TEST(SlurmTasksPerNode, Repeats) {
  std::vector<int> counts;
  ASSERT_TRUE(expandTasksPerNode("2(x3),1", &counts).isOk());
  EXPECT_EQ(counts, (std::vector<int>{2, 2, 2, 1}));
  ASSERT_TRUE(expandTasksPerNode("4", &counts).isOk());
  EXPECT_EQ(counts, (std::vector<int>{4}));
  ASSERT_TRUE(expandTasksPerNode("1,3(x2)", &counts).isOk());
  EXPECT_EQ(counts, (std::vector<int>{1, 3, 3}));
}

TEST(SlurmTasksPerNode, Errors) {
  std::vector<int> counts;
  for (const char* bad : {"", "2(x)", "2(3)", "x", "2,", "0", "2(x0)", "2(x3"}) {
    Status st = expandTasksPerNode(bad, &counts);
    EXPECT_FALSE(st.isOk()) << bad;
    EXPECT_NE(st.message().find("expected counts like 2(x3),1"), std::string::npos) << bad;
  }
}

TEST(SlurmPort, DerivedFromJobAndStep) {
  EXPECT_EQ(slurmRendezvousPort(1, 0), 20008);
  EXPECT_EQ(slurmRendezvousPort(1, 1), 20009);
  EXPECT_EQ(slurmRendezvousPort(1500, 0), 20000);
  for (long long job : {0LL, 7LL, 123456789LL}) {
    int p = slurmRendezvousPort(job, 3);
    EXPECT_GE(p, 20000);
    EXPECT_LE(p, 31999);
  }
}

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return mapEnv(env);
}

// Task 4 of `srun -N 3 -n 7` with 3,2,2 tasks per node: the second task of
// the second node.
Env srunTask() {
  return {{"SLURM_JOB_ID", "42"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_PROCID", "4"},
          {"SLURM_NTASKS", "7"},
          {"SLURM_STEP_NUM_TASKS", "7"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_NNODES", "3"},
          {"SLURM_STEP_NUM_NODES", "3"},
          {"SLURM_STEP_NODELIST", "gnode[10,20],other"},
          {"SLURM_STEP_TASKS_PER_NODE", "3,2(x2)"},
          {"TUTTI_SECRET", "s"}};
}

TEST(SlurmSettings, PlacementFromSrun) {
  Settings s;
  Status st = loadSettings(lookup(srunTask()), &s);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(s.rank, 4);
  EXPECT_EQ(s.size, 7);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_size, 2);
  EXPECT_EQ(s.cross_rank, 1);
  EXPECT_EQ(s.cross_size, 3);
  EXPECT_EQ(s.rendezvous_addr, "gnode10");
  EXPECT_EQ(s.rendezvous_port, 20000 + (42 * 8 + 3) % 12000);
  EXPECT_TRUE(s.rank0_hosts_rendezvous);
  EXPECT_EQ(s.backend, "tcp");
}

TEST(SlurmSettings, TuttiVariablesWin) {
  Env env = srunTask();
  env["TUTTI_RENDEZVOUS_ADDR"] = "10.1.2.3";
  env["TUTTI_RENDEZVOUS_PORT"] = "31337";
  env["TUTTI_LOCAL_SIZE"] = "4";
  Settings s;
  ASSERT_TRUE(loadSettings(lookup(env), &s).isOk());
  EXPECT_EQ(s.rendezvous_addr, "10.1.2.3");
  EXPECT_EQ(s.rendezvous_port, 31337);
  EXPECT_EQ(s.local_size, 4);
  EXPECT_EQ(s.rank, 4);

  // TUTTI_RANK set (tuttirun inside srun): Slurm's variables are ignored.
  env["TUTTI_RANK"] = "0";
  ASSERT_TRUE(loadSettings(lookup(env), &s).isOk());
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.size, 1);
}

TEST(SlurmSettings, OldSlurmWithoutStepVariables) {
  Env env = srunTask();
  env.erase("SLURM_STEP_NUM_TASKS");
  env.erase("SLURM_STEP_NUM_NODES");
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  env["SLURM_JOB_NODELIST"] = "n[5-7]";
  env["SLURM_TASKS_PER_NODE"] = "3,2(x2)";
  Settings s;
  ASSERT_TRUE(loadSettings(lookup(env), &s).isOk());
  EXPECT_EQ(s.size, 7);
  EXPECT_EQ(s.local_size, 2);
  EXPECT_EQ(s.cross_size, 3);
  EXPECT_EQ(s.rendezvous_addr, "n5");
}

TEST(SlurmSettings, BatchStepAndMpirunAreNotSrunTasks) {
  Env env = srunTask();
  env["SLURM_STEP_ID"] = "4294967294";  // the batch script's step
  Settings s;
  ASSERT_TRUE(loadSettings(lookup(env), &s).isOk());
  EXPECT_EQ(s.size, 1);
  env = srunTask();
  env["OMPI_COMM_WORLD_SIZE"] = "2";
  env["OMPI_COMM_WORLD_RANK"] = "1";
  env["TUTTI_BACKEND"] = "tcp";
  ASSERT_TRUE(loadSettings(lookup(env), &s).isOk());
  EXPECT_EQ(s.size, 1);  // TUTTI_BACKEND=tcp under mpirun: neither placement applies
}

TEST(SlurmSettings, MissingSecretSaysToExportIt) {
  Env env = srunTask();
  env.erase("TUTTI_SECRET");
  Settings s;
  Status st = loadSettings(lookup(env), &s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("TUTTI_SECRET is not set"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("export"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("srun"), std::string::npos) << st.message();
}

TEST(SlurmSettings, BadSlurmVariablesAreNamed) {
  Env env = srunTask();
  env["SLURM_NODEID"] = "5";
  Settings s;
  Status st = loadSettings(lookup(env), &s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("SLURM_NODEID=5"), std::string::npos) << st.message();
  env = srunTask();
  env["SLURM_PROCID"] = "x";
  st = loadSettings(lookup(env), &s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("SLURM_PROCID=x"), std::string::npos) << st.message();
  env = srunTask();
  env["SLURM_STEP_NODELIST"] = "n[1-";
  st = loadSettings(lookup(env), &s);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("hostlist 'n[1-'"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tutti

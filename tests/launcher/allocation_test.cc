// Hosts from a resource manager's allocation (launcher/allocation.h) and
// tuttirun --mpi inside one. Expected hosts are written out by hand.

#include "launcher/allocation.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "launcher/mpi_launch.h"

namespace tutti {
namespace launcher {
namespace {

TEST(Allocation, NoneOutsideAnAllocation) {
  Allocation a;
  ASSERT_TRUE(findAllocation({{"PATH", "/bin"}}, &a).isOk());
  EXPECT_FALSE(a.found);
  EXPECT_FALSE(mpirunHasAllocation({{"PATH", "/bin"}}));
}

TEST(Allocation, SlurmNodesAndTasks) {
  Allocation a;
  EnvMap env = {{"SLURM_JOB_NODELIST", "gnode[10,20-21],other"},
                {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                {"SLURM_JOB_CPUS_PER_NODE", "8(x4)"}};
  ASSERT_TRUE(findAllocation(env, &a).isOk());
  ASSERT_TRUE(a.found);
  ASSERT_EQ(a.hosts.size(), 4u);
  EXPECT_EQ(a.hosts[0].host, "gnode10");
  EXPECT_EQ(a.hosts[0].slots, 2);
  EXPECT_EQ(a.hosts[2].host, "gnode21");
  EXPECT_EQ(a.hosts[3].host, "other");
  EXPECT_EQ(a.hosts[3].slots, 1);
  EXPECT_NE(a.source.find("Slurm"), std::string::npos);
  EXPECT_TRUE(mpirunHasAllocation(env));

  // Without tasks (salloc -N 2): one slot per CPU.
  env.erase("SLURM_TASKS_PER_NODE");
  ASSERT_TRUE(findAllocation(env, &a).isOk());
  EXPECT_EQ(a.hosts[1].slots, 8);
}

TEST(Allocation, SlurmErrorsNameTheVariables) {
  Allocation a;
  Status st = findAllocation({{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "2"}}, &a);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("SLURM_TASKS_PER_NODE=2 gives 1 node(s), the node list 2"),
            std::string::npos)
      << st.message();
  st = findAllocation({{"SLURM_JOB_NODELIST", "n[1-2"}, {"SLURM_TASKS_PER_NODE", "2"}}, &a);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("unbalanced"), std::string::npos) << st.message();
  st = findAllocation({{"SLURM_JOB_NODELIST", "n1"}}, &a);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("-H or --hostfile"), std::string::npos) << st.message();
}

TEST(Allocation, OpenMpiDefaultHostfileComesFirst) {
  char path[] = "/tmp/tutti-alloc-test.XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "job-worker-0.job-worker.default.svc slots=2\n"
                         "job-worker-1.job-worker.default.svc slots=2\n";
  Allocation a;
  EnvMap env = {{"OMPI_MCA_orte_default_hostfile", path},
                {"SLURM_JOB_NODELIST", "n1"},
                {"SLURM_TASKS_PER_NODE", "1"}};
  ASSERT_TRUE(findAllocation(env, &a).isOk());
  ASSERT_EQ(a.hosts.size(), 2u);
  EXPECT_EQ(a.hosts[1].host, "job-worker-1.job-worker.default.svc");
  EXPECT_EQ(a.hosts[1].slots, 2);
  std::remove(path);
  Status st = findAllocation(env, &a);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("$OMPI_MCA_orte_default_hostfile"), std::string::npos);
}

TEST(Allocation, MpirunInsideAnAllocationGetsNoHosts) {
  LaunchOptions o;
  o.command = {"./a.out"};
  MpirunContext c;
  c.env = {{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}};
  std::vector<std::string> argv;
  ASSERT_TRUE(mpirunCommand(o, c, &argv).isOk());
  for (const auto& a : argv) {
    EXPECT_NE(a, "-H");
    EXPECT_NE(a, "-np");
  }
  c.np = 6;
  ASSERT_TRUE(mpirunCommand(o, c, &argv).isOk());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "-np"), argv.end());
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "-H"), argv.end());
  // -H given: it wins over the allocation.
  c.hosts = {{"n1", 3}, {"n2", 3}};
  ASSERT_TRUE(mpirunCommand(o, c, &argv).isOk());
  auto h = std::find(argv.begin(), argv.end(), "-H");
  ASSERT_NE(h, argv.end());
  EXPECT_EQ(*(h + 1), "n1:3,n2:3");
}

}  // namespace
}  // namespace launcher
}  // namespace tutti

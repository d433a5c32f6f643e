// tuttirun --mpi: the mpirun command line built from tuttirun's options, and
// the reading of the ranks' finalize notices in mpirun's stderr.

#include "launcher/mpi_launch.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/mpi_exit_notices.h"
#include "launcher/mpirun_watch.h"

namespace tutti {
namespace launcher {
namespace {

bool hasSequence(const std::vector<std::string>& argv, const std::vector<std::string>& seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += a + " ";
  return out;
}

TEST(MpirunCommand, SamePlacementSettingsAndVariables) {
  LaunchOptions o;
  o.np = 4;
  o.command = {"python3", "train.py", "--epochs", "1"};
  MpirunContext c;
  c.hosts = {{"a", 2}, {"b", 2}};
  c.np = 4;
  c.env = {{"TUTTI_FUSION_THRESHOLD_BYTES", "1048576"},
           {"TUTTI_RANK", "3"},
           {"TUTTI_SECRET", "s"},
           {"FOO", "bar"},
           {"PATH", "/bin"},
           {"OMP_NUM_THREADS", "2"}};
  c.env_names = {"FOO"};
  c.local_cores = 8;
  c.root = true;
  std::vector<std::string> argv;
  ASSERT_TRUE(mpirunCommand(o, c, &argv).isOk());
  const std::string all = joined(argv);
  EXPECT_EQ(argv.front(), "mpirun");
  EXPECT_TRUE(hasSequence(argv, {"--allow-run-as-root"})) << all;
  EXPECT_TRUE(hasSequence(argv, {"-np", "4"})) << all;
  EXPECT_TRUE(hasSequence(argv, {"-H", "a:2,b:2", "--map-by", "slot", "--bind-to", "none"})) << all;
  EXPECT_TRUE(hasSequence(argv, {"-x", "TUTTI_FUSION_THRESHOLD_BYTES=1048576"})) << all;
  EXPECT_TRUE(hasSequence(argv, {"-x", "FOO=bar"})) << all;
  EXPECT_TRUE(hasSequence(argv, {"-x", "TUTTI_BACKEND=mpi"})) << all;
  EXPECT_EQ(all.find("TUTTI_RANK"), std::string::npos) << "placement is MPI's: " << all;
  EXPECT_EQ(all.find("TUTTI_SECRET"), std::string::npos) << all;
  EXPECT_EQ(all.find("PATH=/bin"), std::string::npos) << "only -x and TUTTI_* travel: " << all;
  EXPECT_EQ(all.find("OMP_NUM_THREADS="), std::string::npos) << "already set: " << all;
  EXPECT_EQ(all.find("--oversubscribe"), std::string::npos) << "a and b are remote: " << all;
  EXPECT_TRUE(std::equal(o.command.begin(), o.command.end(), argv.end() - 4)) << all;
}

TEST(MpirunCommand, LocalJobWithMoreRanksThanCores) {
  LaunchOptions o;
  o.np = 4;
  o.command = {"./a.out"};
  MpirunContext c;
  c.np = 4;
  c.local_cores = 2;
  std::vector<std::string> argv;
  ASSERT_TRUE(mpirunCommand(o, c, &argv).isOk());
  const std::string all = joined(argv);
  EXPECT_TRUE(hasSequence(argv, {"-H", "localhost:4"})) << all;
  EXPECT_TRUE(hasSequence(argv, {"--oversubscribe", "--mca", "mpi_yield_when_idle", "1"})) << all;
  EXPECT_TRUE(hasSequence(argv, {"-x", "OMP_NUM_THREADS=1"})) << all;
  EXPECT_EQ(all.find("--allow-run-as-root"), std::string::npos) << all;
}

TEST(MpirunCommand, ContradictingBackendAndTooFewSlotsAreErrors) {
  LaunchOptions o;
  o.command = {"x"};
  MpirunContext c;
  c.np = 2;
  c.env = {{"TUTTI_BACKEND", "tcp"}};
  std::vector<std::string> argv;
  Status st = mpirunCommand(o, c, &argv);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("TUTTI_BACKEND=tcp"), std::string::npos) << st.message();
  c.env.clear();
  c.hosts = {{"a", 1}};
  st = mpirunCommand(o, c, &argv);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
}

}  // namespace
}  // namespace launcher
}  // namespace tutti

namespace tutti {
namespace launcher {
namespace {

// The ranks' finalize notices as mpirun passes them on (--tag-output and the
// log's prefix), split across reads anywhere.
TEST(FinalizeNoticeCounter, CountsDistinctRanksAcrossSplitReads) {
  std::string stream = "[1,0]<stdout>:hello\n";
  for (int r : {2, 0, 2, 1}) {
    stream += "[1," + std::to_string(r) + "]<stderr>:[tutti WARNING rank " + std::to_string(r) +
              " mpi_environment.cc:87] " + finalizeGiveUpNotice(r, r == 1 ? 3 : 0, 5) + "\n";
  }
  stream += "[1,3]<stderr>:rank 3: MPI_Finalize did not return within 5 s (no status)\n";
  stream += "[1,3]<stderr>:" + finalizeGiveUpNotice(3, 0, 5);  // no newline yet
  FinalizeNoticeCounter counter;
  for (size_t i = 0; i < stream.size(); i += 7) {
    counter.feed(stream.data() + i, std::min<size_t>(7, stream.size() - i));
  }
  EXPECT_EQ(counter.ranks(), 3) << "ranks 0, 1, 2; rank 3's line is not complete";
  EXPECT_EQ(counter.exitStatus(), 3) << "rank 1 reported exit status 3";
  counter.feed("\n", 1);
  EXPECT_EQ(counter.ranks(), 4);
}

TEST(FinalizeNoticeCounter, SeesAbortNotices) {
  FinalizeNoticeCounter counter;
  const std::string finalize = "[1,0]<stderr>:" + finalizeGiveUpNotice(0, 0, 5) + "\n";
  counter.feed(finalize.data(), finalize.size());
  EXPECT_FALSE(counter.abortSeen());
  const std::string abort =
      "[1,1]<stderr>:rank 1: MPI_Ibcast on the global process set (ranks "
      "0-1) made no progress for 5 s (TUTTI_TIMEOUT_SECONDS): x; " +
      mpiAbortNotice(2) + "\n";
  counter.feed(abort.data(), abort.size());
  EXPECT_TRUE(counter.abortSeen());
  EXPECT_EQ(counter.abortGraceSeconds(), 2);
  EXPECT_EQ(counter.ranks(), 1) << "an abort notice is no finalize notice";
  EXPECT_NE(mpiAbortNotice(0.5).find("MPI_Abort in 0.5 s"), std::string::npos);
}

TEST(FinalizeNoticeCounter, NoticeReadsBack) {
  int rank = -1, status = -1;
  ASSERT_TRUE(parseFinalizeGiveUpNotice("x " + finalizeGiveUpNotice(12, 130, 0.5), &rank, &status));
  EXPECT_EQ(rank, 12);
  EXPECT_EQ(status, 130);
  EXPECT_NE(finalizeGiveUpNotice(12, 130, 0.5).find("within 0.5 s"), std::string::npos);
  EXPECT_FALSE(
      parseFinalizeGiveUpNotice("rank x: MPI_Finalize did not return within 5 s; "
                                "leaving with exit status 0 without it",
                                &rank, &status));
  EXPECT_FALSE(parseFinalizeGiveUpNotice("MPI_Finalize hung", &rank, &status));
}

}  // namespace
}  // namespace launcher
}  // namespace tutti

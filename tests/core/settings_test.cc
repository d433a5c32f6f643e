// loadSettings (core/settings.h) on an environment passed in: what the
// placement defaults to, where mpirun's variables apply, and the rules across
// settings. Expected values are written out by hand from the header's rules.

#include "core/settings.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace tutti {
namespace {

EnvLookup envOf(std::map<std::string, std::string> vars) {
  return mapEnv(std::move(vars));
}

// rank, size, local rank, local size, cross rank, cross size.
std::vector<int> placementOf(const Settings& s) {
  return {s.rank, s.size, s.local_rank, s.local_size, s.cross_rank, s.cross_size};
}

TEST(LoadSettings, LocalPlacementDefaultsToTheGlobalOne) {
  Settings s;
  ASSERT_TRUE(
      loadSettings(envOf({{"TUTTI_RANK", "2"}, {"TUTTI_SIZE", "4"}, {"TUTTI_SECRET", "k"}}), &s)
          .isOk());
  EXPECT_EQ(placementOf(s), (std::vector<int>{2, 4, 2, 4, 0, 1}));
  EXPECT_EQ(s.secret, "k");
  EXPECT_EQ(s.backend, "tcp");
  EXPECT_TRUE(s.rank0_hosts_rendezvous);  // TUTTI_RENDEZVOUS_SERVER's default: rank0
}

TEST(LoadSettings, MpirunPlacementOnlyForTheMpiBackend) {
  const std::map<std::string, std::string> ompi = {{"OMPI_COMM_WORLD_SIZE", "3"},
                                                   {"OMPI_COMM_WORLD_RANK", "1"},
                                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}};
  Settings s;
  ASSERT_TRUE(loadSettings(envOf(ompi), &s).isOk());  // auto under mpirun: mpi
  EXPECT_EQ(s.backend, "mpi");
  EXPECT_EQ(placementOf(s), (std::vector<int>{1, 3, 1, 3, 0, 1}));
  // TUTTI_* wins where it is set.
  auto with_rank = ompi;
  with_rank["TUTTI_RANK"] = "2";
  ASSERT_TRUE(loadSettings(envOf(with_rank), &s).isOk());
  EXPECT_EQ(s.rank, 2);
  // With tcp chosen, mpirun's variables are not read (and a secret is needed).
  auto tcp = ompi;
  tcp["TUTTI_BACKEND"] = "tcp";
  ASSERT_TRUE(loadSettings(envOf(tcp), &s).isOk());
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.size, 1);
  auto bad = ompi;
  bad["OMPI_COMM_WORLD_RANK"] = "x";
  Status st = loadSettings(envOf(bad), &s);
  EXPECT_NE(st.message().find("OMPI_COMM_WORLD_RANK=x: expected an integer"), std::string::npos)
      << st.message();
}

TEST(LoadSettings, RanksMustBeBelowTheirSizes) {
  struct Case {
    std::map<std::string, std::string> env;
    const char* says;
  };
  for (const Case& c :
       {Case{{{"TUTTI_RANK", "4"}, {"TUTTI_SIZE", "4"}},
             "TUTTI_RANK=4: expected an integer in [0, TUTTI_SIZE-1] = [0, 3]"},
        Case{{{"TUTTI_LOCAL_RANK", "2"}, {"TUTTI_LOCAL_SIZE", "2"}},
             "TUTTI_LOCAL_RANK=2: expected an integer in [0, TUTTI_LOCAL_SIZE-1] = [0, 1]"},
        Case{{{"TUTTI_CROSS_RANK", "1"}},
             "TUTTI_CROSS_RANK=1: expected an integer in [0, TUTTI_CROSS_SIZE-1] = [0, 0]"}}) {
    Settings s;
    Status st = loadSettings(envOf(c.env), &s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.says;
    EXPECT_EQ(st.message(), c.says);
  }
}

TEST(LoadSettings, SecretAndElasticRules) {
  Settings s;
  Status st = loadSettings(envOf({{"TUTTI_SIZE", "2"}}), &s);
  EXPECT_NE(st.message().find("TUTTI_SECRET is not set: a job of more than one rank"),
            std::string::npos)
      << st.message();
  st = loadSettings(envOf({{"TUTTI_ELASTIC_WORKER_ID", "0"}}), &s);
  EXPECT_NE(st.message().find("TUTTI_SECRET is not set"), std::string::npos) << st.message();
  st = loadSettings(
      envOf({{"TUTTI_ELASTIC_WORKER_ID", "0"}, {"TUTTI_BACKEND", "mpi"}, {"TUTTI_SECRET", "k"}}),
      &s);
  EXPECT_NE(st.message().find("TUTTI_BACKEND=mpi: elastic training (TUTTI_ELASTIC_WORKER_ID=0) "
                              "needs the tcp backend"),
            std::string::npos)
      << st.message();
  // The mpi backend needs no secret.
  EXPECT_TRUE(loadSettings(envOf({{"TUTTI_SIZE", "2"}, {"TUTTI_BACKEND", "mpi"}}), &s).isOk());
  EXPECT_EQ(s.size, 2);
}

}  // namespace
}  // namespace tutti

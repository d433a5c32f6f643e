// Algorithm selection as data (ops/algorithm_table.h): the TUTTI_ALGORITHMS
// parser's accepted forms and its errors, and the pure selection order
// (overrides first, then the table; a candidate that does not fit says why
// and the next is taken).

#include "ops/algorithm_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tutti {
namespace {

std::vector<AlgorithmOverride> parsed(const std::string& text) {
  std::vector<AlgorithmOverride> out;
  const Status st = parseAlgorithmOverrides(text, &out);
  EXPECT_TRUE(st.isOk()) << text << ": " << st.toString();
  return out;
}

std::string errorOf(const std::string& text) {
  std::vector<AlgorithmOverride> out;
  const Status st = parseAlgorithmOverrides(text, &out);
  EXPECT_FALSE(st.isOk()) << text << " was accepted";
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  return st.message();
}

std::string chosen(const std::vector<AlgorithmOverride>& overrides, const char* collective,
                   uint64_t bytes) {
  const AlgorithmChoice c =
      selectAlgorithm(algorithmTable(), overrides, AlgorithmCase{collective, bytes, "tcp"});
  return c.entry == nullptr ? "none" : c.entry->name;
}

TEST(AlgorithmOverrides, ParsesRangesWithSuffixes) {
  const auto o =
      parsed("allreduce:0-4k:recursive_doubling,broadcast:1m-:chain,allreduce:5-inf:ring");
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0].collective, "allreduce");
  EXPECT_EQ(o[0].min_bytes, 0u);
  EXPECT_EQ(o[0].max_bytes, 4096u);
  EXPECT_STREQ(o[0].entry->name, "recursive_doubling");
  EXPECT_EQ(o[0].entry->id, AlgorithmId::kAllreduceRecursiveDoubling);
  EXPECT_EQ(o[1].min_bytes, 1024u * 1024u);
  EXPECT_EQ(o[1].max_bytes, kNoByteLimit);
  EXPECT_EQ(o[1].entry->id, AlgorithmId::kBroadcastChain);
  EXPECT_EQ(o[2].min_bytes, 5u);
  EXPECT_EQ(o[2].max_bytes, kNoByteLimit);
  EXPECT_TRUE(parsed("").empty());
  EXPECT_EQ(parsed("allgather:0-1g:ring")[0].max_bytes, 1024ull * 1024 * 1024);
}

TEST(AlgorithmOverrides, ErrorsNameTheEntryAndWhatIsAccepted) {
  std::string e = errorOf("allreduce:0-4k:ring,allreduce:0-4k:tree");
  EXPECT_NE(e.find("'allreduce:0-4k:tree'"), std::string::npos) << e;
  EXPECT_NE(
      e.find(
          "unknown allreduce algorithm 'tree'; accepted: recursive_doubling, hierarchical, ring"),
      std::string::npos)
      << e;
  e = errorOf("allreduse:0-4k:ring");
  EXPECT_NE(e.find("unknown collective 'allreduse'"), std::string::npos) << e;
  EXPECT_NE(e.find("allreduce,broadcast,allgather,alltoall,reducescatter,barrier"),
            std::string::npos)
      << e;
  EXPECT_NE(errorOf("broadcast:4k:binomial").find("bad byte range '4k'"), std::string::npos);
  EXPECT_NE(errorOf("broadcast:8k-4k:binomial").find("bad byte range '8k-4k'"), std::string::npos);
  EXPECT_NE(errorOf("broadcast:0-4x:binomial").find("bad byte range"), std::string::npos);
  EXPECT_NE(errorOf("broadcast:-1-4:binomial").find("bad byte range"), std::string::npos);
  EXPECT_NE(errorOf("broadcast:binomial").find("not three fields"), std::string::npos);
  EXPECT_NE(errorOf("broadcast:0-1:binomial:x").find("not three fields"), std::string::npos);
  EXPECT_NE(errorOf("broadcast:0-1:binomial,,").find("not three fields"), std::string::npos);
  EXPECT_NE(errorOf("broadcast:0-1:binomial,").find("empty entry"), std::string::npos);
  EXPECT_NE(errorOf("x").find("expected COLLECTIVE:LO-HI:NAME"), std::string::npos);
}

TEST(AlgorithmSelection, DefaultsChooseBySize) {
  EXPECT_EQ(chosen({}, "allreduce", 0), "recursive_doubling");
  EXPECT_EQ(chosen({}, "allreduce", 64 * 1024), "recursive_doubling");
  EXPECT_EQ(chosen({}, "allreduce", 64 * 1024 + 1), "ring");
  EXPECT_EQ(chosen({}, "broadcast", 4), "binomial");
  EXPECT_EQ(chosen({}, "broadcast", 64 * 1024 + 1), "chain");
  EXPECT_EQ(chosen({}, "barrier", 0), "dissemination");
  EXPECT_EQ(chosen({}, "nosuch", 0), "none");
}

TEST(AlgorithmSelection, OverridesComeFirstOnlyInTheirRange) {
  const auto o = parsed("allreduce:0-4k:ring,allreduce:1m-:recursive_doubling");
  EXPECT_EQ(chosen(o, "allreduce", 4096), "ring");
  EXPECT_EQ(chosen(o, "allreduce", 4097), "recursive_doubling");  // the default range
  EXPECT_EQ(chosen(o, "allreduce", 1 << 20), "recursive_doubling");
  EXPECT_EQ(chosen(o, "allreduce", 1 << 19), "ring");
  EXPECT_EQ(chosen(o, "broadcast", 1), "binomial");  // other collectives untouched
  // The first matching override wins.
  EXPECT_EQ(chosen(parsed("broadcast:0-:chain,broadcast:0-:binomial"), "broadcast", 1), "chain");
}

TEST(AlgorithmSelection, ACandidateThatDoesNotFitSaysWhyAndTheNextIsTaken) {
  const auto o = parsed("allreduce:0-:recursive_doubling");
  const AlgorithmChoice big =
      selectAlgorithm(algorithmTable(), o, AlgorithmCase{"allreduce", 100u << 20, "tcp"});
  ASSERT_NE(big.entry, nullptr);
  EXPECT_STREQ(big.entry->name, "ring");
  ASSERT_EQ(big.declined.size(), 2u);
  EXPECT_NE(big.declined[0].find("recursive_doubling: above 64 MiB"), std::string::npos)
      << big.declined[0];
  EXPECT_EQ(big.declined[1], "hierarchical: all ranks are on one host");
  // A transport no algorithm runs over: every candidate declines.
  const AlgorithmChoice none =
      selectAlgorithm(algorithmTable(), {}, AlgorithmCase{"broadcast", 1, "rdma"});
  EXPECT_EQ(none.entry, nullptr);
  ASSERT_EQ(none.declined.size(), 3u);
  EXPECT_EQ(none.declined[0], "hierarchical: runs over tcp, not rdma");
  EXPECT_EQ(none.declined[1], "binomial: runs over tcp, not rdma");
}

// Hierarchical allreduce: above recursive doubling's range when there are
// several hosts with the same number (> 1) of ranks each.
TEST(AlgorithmSelection, HierarchicalFollowsThePlacement) {
  auto pick = [](uint64_t bytes, int local_size, int cross_size, bool allowed = true) {
    AlgorithmCase c{"allreduce", bytes, "tcp"};
    c.local_size = local_size;
    c.cross_size = cross_size;
    c.hierarchical_allowed = allowed;
    const AlgorithmChoice choice = selectAlgorithm(algorithmTable(), {}, c);
    return std::string(choice.entry->name) +
           (choice.declined.empty() ? "" : " (" + choice.declined.back() + ")");
  };
  EXPECT_EQ(pick(1 << 20, 2, 2), "hierarchical");
  EXPECT_EQ(pick(1 << 20, 4, 3), "hierarchical");
  EXPECT_EQ(pick(64 * 1024, 2, 2), "recursive_doubling");
  EXPECT_EQ(pick(1 << 20, 2, 2, false),
            "ring (hierarchical: turned off (TUTTI_HIERARCHICAL_ALLREDUCE=0))");
  EXPECT_EQ(pick(1 << 20, 1, 4), "ring (hierarchical: one rank per host)");
  EXPECT_EQ(pick(1 << 20, 0, 2), "ring (hierarchical: hosts hold different numbers of ranks)");
  EXPECT_EQ(pick(1 << 20, 4, 1), "ring (hierarchical: all ranks are on one host)");
  // Forced for every size, as TUTTI_HIERARCHICAL_ALLREDUCE=1 does.
  AlgorithmCase small{"allreduce", 8, "tcp"};
  small.local_size = 3;
  small.cross_size = 2;
  EXPECT_STREQ(
      selectAlgorithm(algorithmTable(), parsed("allreduce:0-:hierarchical"), small).entry->name,
      "hierarchical");
}

// Hierarchical broadcast: for every size when there are several hosts with
// the same number (> 1) of ranks each; it has no switch of its own, and
// TUTTI_ALGORITHMS chooses a flat one.
TEST(AlgorithmSelection, HierarchicalBroadcastFollowsThePlacement) {
  auto pick = [](uint64_t bytes, int local_size, int cross_size,
                 const std::vector<AlgorithmOverride>& overrides = {}) {
    AlgorithmCase c{"broadcast", bytes, "tcp"};
    c.local_size = local_size;
    c.cross_size = cross_size;
    const AlgorithmChoice choice = selectAlgorithm(algorithmTable(), overrides, c);
    return std::string(choice.entry->name) +
           (choice.declined.empty() ? "" : " (" + choice.declined.back() + ")");
  };
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{64 * 1024}, uint64_t{64 * 1024 + 1},
                         uint64_t{1} << 30, kNoByteLimit}) {
    EXPECT_EQ(pick(bytes, 2, 2), "hierarchical") << bytes;
    EXPECT_EQ(pick(bytes, 3, 4), "hierarchical") << bytes;
  }
  EXPECT_EQ(pick(8, 1, 4), "binomial (hierarchical: one rank per host)");
  EXPECT_EQ(pick(1 << 20, 1, 4), "chain (hierarchical: one rank per host)");
  EXPECT_EQ(pick(8, 0, 2), "binomial (hierarchical: hosts hold different numbers of ranks)");
  EXPECT_EQ(pick(1 << 20, 4, 1), "chain (hierarchical: all ranks are on one host)");
  EXPECT_EQ(pick(1 << 20, 2, 2, parsed("broadcast:0-inf:chain")), "chain");
  EXPECT_EQ(pick(8, 2, 2, parsed("broadcast:0-inf:binomial")), "binomial");
  // Not turned off by an allreduce or allgather setting; the reason names none.
  AlgorithmCase off{"broadcast", 8, "tcp"};
  off.local_size = 2;
  off.cross_size = 2;
  off.hierarchical_allowed = false;
  const AlgorithmChoice choice = selectAlgorithm(algorithmTable(), {}, off);
  ASSERT_EQ(choice.declined.size(), 1u);
  EXPECT_EQ(choice.declined[0], "hierarchical: turned off");
}

TEST(AlgorithmSelection, EveryCollectiveHasAnEntryForEverySize) {
  for (const AlgorithmEntry& e : algorithmTable()) {
    for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 40, kNoByteLimit}) {
      EXPECT_NE(chosen({}, e.collective, bytes), "none") << e.collective << " " << bytes;
    }
  }
}

TEST(AlgorithmSelection, TableTextListsEveryAlgorithm) {
  const std::string text = algorithmTableText();
  EXPECT_NE(text.find("allreduce:0-64k:recursive_doubling  [tcp]"), std::string::npos) << text;
  EXPECT_NE(text.find("allreduce:0-inf:ring  [tcp]"), std::string::npos) << text;
  EXPECT_NE(text.find("allreduce:0-inf:hierarchical  [tcp]"), std::string::npos) << text;
  EXPECT_NE(text.find("broadcast:0-64k:binomial"), std::string::npos) << text;
  EXPECT_NE(text.find("broadcast:0-inf:hierarchical  [tcp]"), std::string::npos) << text;
  EXPECT_NE(text.find("barrier:0-inf:dissemination"), std::string::npos) << text;
}

}  // namespace
}  // namespace tutti

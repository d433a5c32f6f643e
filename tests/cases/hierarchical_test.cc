// Allreduce with TUTTI_HIERARCHICAL_ALLREDUCE=1 through the runtime, ranks as
// threads on simulated hosts (ClusterOptions::ranks_per_host sets
// TUTTI_CROSS_RANK and TUTTI_LOCAL_*): 2x2, 2x3, 3x2 and hosts of different
// sizes (where the flat ring runs), every dtype x op, pre- and postscale,
// allgather (TUTTI_HIERARCHICAL_ALLGATHER=1), broadcast from every root,
// process sets whose members make their own placement, and "fp16:cross_host"
// compression. Expected values are
// computed here (tests/support/reduce_values.h).

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/support/host_tensor.h"
#include "tests/support/op_checks.h"
#include "tests/support/reduce_values.h"
#include "tests/support/thread_harness.h"

namespace tutti {
namespace test {
namespace {

constexpr int64_t kSegmentBytes = 4096;

struct Hosts {
  int size;
  int ranks_per_host;
  const char* name;
};

ClusterOptions onHosts(const Hosts& h) {
  ClusterOptions o;
  o.segment_bytes = kSegmentBytes;
  o.ranks_per_host = h.ranks_per_host;
  o.hierarchical_allreduce = "1";
  o.hierarchical_allgather = "1";
  return o;
}

// One allreduce of `count` elements among `members` (global ranks; this
// rank is member `me`) in `set`, checked against the reference.
void checkAllreduce(Runtime& rt, DataType dtype, ReduceOp op, int64_t count, int me, int members,
                    int32_t set, const std::string& name) {
  SCOPED_TRACE(name);
  HostTensor input(dtype, {count});
  HostTensor output(dtype, {count});
  input.fill([&](int64_t i) { return reduceInput(dtype, op, i, me, members); });
  output.fill([](int64_t) { return 77; });
  OpOptions opts = named(name);
  opts.reduce_op = op;
  opts.process_set = set;
  ASSERT_TRUE(IsOk(runOpStatus(
      rt, [&](Handle* h) { return rt.allreduce(input.view(), output.view(), opts, h); })));
  EXPECT_TRUE(elementsMatch(
      output, [&](int64_t i) { return reduceExpected(dtype, op, i, members); },
      reduceTolerance(dtype, op)));
}

// One broadcast of `count` int32 from global rank `root` in `set`; every
// member must end with the root's values.
void checkBroadcast(Runtime& rt, int64_t count, int root, int32_t set, const std::string& name) {
  SCOPED_TRACE(name + " root " + std::to_string(root));
  auto value = [](int r, int64_t i) { return static_cast<double>(r * 1000 + i % 997); };
  HostTensor input(DataType::kInt32, {count});
  HostTensor output(DataType::kInt32, {count});
  input.fill([&](int64_t i) { return value(rt.rank(), i); });
  output.fill([](int64_t) { return -1; });
  OpOptions opts = named(name);
  opts.root = root;
  opts.process_set = set;
  ASSERT_TRUE(IsOk(runOpStatus(
      rt, [&](Handle* h) { return rt.broadcast(input.view(), output.view(), opts, h); })));
  EXPECT_TRUE(elementsMatch(output, [&](int64_t i) { return value(root, i); }));
}

class HierarchicalRuntimeTest : public ::testing::TestWithParam<Hosts> {};

TEST_P(HierarchicalRuntimeTest, EveryDtypeAndOpIsTheReduction) {
  const Hosts hosts = GetParam();
  runThreadRanks(
      hosts.size,
      [&](Runtime& rt) {
        int index = 0;
        // Fewer elements than ranks per host, uneven blocks, several segments.
        for (int64_t count : {int64_t{1}, int64_t{1009}, int64_t{3 * kSegmentBytes + 5}}) {
          for (DataType dtype : allDataTypes()) {
            for (int o = 0; o < kNumReduceOps; ++o) {
              const auto op = static_cast<ReduceOp>(o);
              if (!opAllowed(dtype, op)) continue;
              checkAllreduce(rt, dtype, op, count, rt.rank(), rt.size(), kGlobalProcessSet,
                             indexedName("hier", index++));
            }
          }
        }
      },
      onHosts(hosts));
}

// q · Σ_r (p · x_r), exact halves in float32, truncation per rank in int32
// (as the flat path: tests/cases/allreduce_test.cc).
TEST_P(HierarchicalRuntimeTest, PrescaleAndPostscale) {
  const Hosts hosts = GetParam();
  runThreadRanks(
      hosts.size,
      [&](Runtime& rt) {
        for (DataType dtype : {DataType::kFloat32, DataType::kInt32}) {
          // Past one 4 MiB chunk of the pipeline.
          HostTensor in(dtype, {(1 << 20) + 7});
          HostTensor out(dtype, {(1 << 20) + 7});
          in.fill([&](int64_t i) { return baseValue(dtype, i) + rt.rank(); });
          OpOptions opts = named(std::string("scaled_") + dataTypeName(dtype));
          opts.prescale = 0.5;
          opts.postscale = 3.0;
          ASSERT_TRUE(IsOk(runOpStatus(
              rt, [&](Handle* h) { return rt.allreduce(in.view(), out.view(), opts, h); })));
          const bool real = dtype == DataType::kFloat32;
          EXPECT_TRUE(elementsMatch(out, [&](int64_t i) {
            double sum = 0;
            for (int r = 0; r < rt.size(); ++r) {
              const double mine = 0.5 * (baseValue(dtype, i) + r);
              sum += real ? mine : std::trunc(mine);
            }
            return real ? 3.0 * sum : std::trunc(3.0 * sum);
          })) << dataTypeName(dtype);
        }
      },
      onHosts(hosts));
}

// Allgather with TUTTI_HIERARCHICAL_ALLGATHER=1: rank r contributes
// 300 (r + 1) rows, none when r % 3 == 1; every element names its rank and row.
TEST_P(HierarchicalRuntimeTest, AllgatherInRankOrder) {
  const Hosts hosts = GetParam();
  auto rows = [](int r) { return r % 3 == 1 ? int64_t{0} : int64_t{300} * (r + 1); };
  runThreadRanks(
      hosts.size,
      [&](Runtime& rt) {
        HostTensor in(DataType::kInt32, {rows(rt.rank()), 3});
        in.fill([&](int64_t i) { return rt.rank() * 100000 + i; });
        OpResult result =
            runOp(rt, [&](Handle* h) { return rt.allgather(in.view(), named("hier_ag"), h); });
        ASSERT_TRUE(IsOk(result.status));
        ASSERT_TRUE(result.has_output);
        std::vector<double> expected;
        for (int r = 0; r < rt.size(); ++r) {
          for (int64_t i = 0; i < rows(r) * 3; ++i) expected.push_back(r * 100000.0 + i);
        }
        ASSERT_EQ(numElements(result.output.shape), static_cast<int64_t>(expected.size()));
        EXPECT_TRUE(elementsMatch(result.output, [&](int64_t i) { return expected[i]; }));
      },
      onHosts(hosts));
}

// Broadcast (hierarchical by default on these hosts, flat on uneven ones)
// from every root, of a tree-sized (4 KB) and a chain-sized (80 KB) tensor.
TEST_P(HierarchicalRuntimeTest, BroadcastFromEveryRoot) {
  const Hosts hosts = GetParam();
  runThreadRanks(
      hosts.size,
      [&](Runtime& rt) {
        for (int root = 0; root < rt.size(); ++root) {
          for (int64_t count : {int64_t{1009}, int64_t{20011}}) {
            checkBroadcast(rt, count, root, kGlobalProcessSet,
                           "hier_bc." + std::to_string(root) + "." + std::to_string(count));
          }
        }
      },
      onHosts(hosts));
}

INSTANTIATE_TEST_SUITE_P(Placements, HierarchicalRuntimeTest,
                         ::testing::Values(Hosts{4, 2, "h2x2"}, Hosts{6, 3, "h2x3"},
                                           Hosts{6, 2, "h3x2"}, Hosts{5, 2, "uneven_2_2_1"}),
                         [](const ::testing::TestParamInfo<Hosts>& info) {
                           return std::string(info.param.name);
                         });

// "fp16:cross_host" through the runtime: sums and averages of a fused group
// within fp16 rounding of the exact values (two roundings of each host's
// partial sum plus one per cross-host add), exact where the values are
// small integers; on uneven hosts the whole buffer is cast (fp16's bound).
TEST_P(HierarchicalRuntimeTest, Fp16AcrossHostsOnly) {
  const Hosts hosts = GetParam();
  runThreadRanks(
      hosts.size,
      [&](Runtime& rt) {
        const int n = rt.size();
        const std::vector<int64_t> counts = {30000, 7, 12000};  // one fused buffer > 64 KiB
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          for (const bool integer : {true, false}) {
            auto value = [&](int r, int64_t i) {
              return integer ? double((r + 1) * (i % 13)) : 1.0 + 0.001 * r + 1e-5 * (i % 997);
            };
            std::vector<HostTensor> ins, outs;
            std::vector<TensorView> in_views, out_views;
            for (int64_t c : counts) {
              ins.emplace_back(DataType::kFloat32, Shape{c});
              outs.emplace_back(DataType::kFloat32, Shape{c});
              ins.back().fill([&](int64_t i) { return value(rt.rank(), i); });
            }
            for (size_t k = 0; k < counts.size(); ++k) {
              in_views.push_back(ins[k].view());
              out_views.push_back(outs[k].view());
            }
            OpOptions opts = named(std::string("xh.") + reduceOpName(op) + (integer ? "i" : "f"));
            opts.reduce_op = op;
            opts.compression = "fp16:cross_host";
            std::vector<Handle> hs;
            ASSERT_TRUE(IsOk(rt.groupedAllreduce(in_views, out_views, opts, &hs)));
            for (Handle h : hs) ASSERT_TRUE(IsOk(finishHandle(rt, h)));
            const double factor = op == ReduceOp::kAverage ? 1.0 / n : 1.0;
            for (size_t k = 0; k < counts.size(); ++k) {
              EXPECT_TRUE(elementsMatch(
                  outs[k],
                  [&](int64_t i) {
                    double sum = 0;
                    for (int r = 0; r < n; ++r) sum += value(r, i);
                    return sum * factor;
                  },
                  integer && op == ReduceOp::kSum ? 0.0 : (n + 1) * std::ldexp(1.0, -11)))
                  << reduceOpName(op) << " tensor " << k << (integer ? " integers" : "");
            }
          }
        }
      },
      onHosts(hosts));
}

// 3 hosts x 2 ranks: the set {0, 1, 4, 5} spans 2 hosts x 2 ranks
// (hierarchical), the set {1, 2, 3, 5} has hosts of 1, 2 and 1 (flat ring);
// both run at once with the world; each broadcasts from global rank 5.
TEST(HierarchicalRuntime, ProcessSetsTakeTheirMembersPlacement) {
  runThreadRanks(
      6,
      [&](Runtime& rt) {
        const std::vector<std::vector<int>> sets = {{0, 1, 4, 5}, {1, 2, 3, 5}};
        std::vector<int32_t> ids;
        for (const auto& ranks : sets) {
          int32_t id = -1;
          ASSERT_TRUE(IsOk(rt.addProcessSet(ranks, &id)));
          ids.push_back(id);
        }
        for (size_t s = 0; s < sets.size(); ++s) {
          const auto& ranks = sets[s];
          for (size_t me = 0; me < ranks.size(); ++me) {
            if (ranks[me] != rt.rank()) continue;
            for (DataType dtype : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16}) {
              checkAllreduce(rt, dtype, ReduceOp::kSum, 30011, static_cast<int>(me), 4, ids[s],
                             "set" + std::to_string(s) + dataTypeName(dtype));
            }
            // The root is a global rank: 5, the second rank of host 2.
            checkBroadcast(rt, 20011, 5, ids[s], "set" + std::to_string(s) + "bc");
          }
        }
        checkAllreduce(rt, DataType::kFloat64, ReduceOp::kMax, 30011, rt.rank(), 6,
                       kGlobalProcessSet, "world");
        EXPECT_TRUE(IsOk(runOpStatus(rt, [&](Handle* h) { return rt.barrier(h); })));
      },
      onHosts(Hosts{6, 2, "h3x2"}));
}

}  // namespace
}  // namespace test
}  // namespace tutti

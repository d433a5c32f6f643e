// tutti-bench: collective benchmarks in the manner of nccl-tests.
//
//   tuttirun -np 4 tutti-bench -b 8 -e 128M -f 2 --op allreduce
//   tuttirun -np 3 tutti-bench -b 4 -e 1M -f 4 -n 3 -w 1 -c 1 --op all
//   tuttirun -np 2 tutti-bench --gradient-set -n 10 -w 2
//
// For each size from -b to -e (times -f), each collective runs -w untimed and
// -n timed iterations, one op at a time (enqueue, then wait), under one tensor
// name per collective and size that every iteration reuses (so steady state
// goes through the response cache, as in training). A row gives size, count,
// dtype, reduce op, collective, time (µs: median over the iterations of the
// slowest rank's time), algbw and busbw (GB/s, nccl-tests' definitions) and
// #wrong: with -c 1, one more iteration after the timed ones runs on
// poisoned outputs and counts, over all ranks, the elements that differ from
// the exact expected result. Exits 1 when any #wrong is not 0.
//
// --root N broadcasts from rank N (of the world, or of --process-set).
// --ordered issues every op on the ordered lane (OpOptions::ordered).
// --gradient-set runs bench/gradient_set.h instead. Settings come from the
// TUTTI_* environment (tuttirun writes them; TUTTI_FUSION_THRESHOLD_BYTES=0
// turns fusion off).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/collective_case.h"
#include "bench/gradient_set.h"
#include "coordinator/runtime.h"

namespace {

using tutti::Status;
using tutti::bench::Collective;
using tutti::bench::CollectiveCase;

struct Options {
  bench_sweep sweep = bench_default_sweep();
  std::string dtype = "float32";
  std::string reduce_op = "sum";
  std::string op = "allreduce";
  bool gradient_set = false;
  std::vector<int> process_set;  // empty: every rank
  int root = 0;                  // broadcast root among the set's (the world's) ranks
  bool ordered = false;          // the ordered lane (tutti_op_options.ordered)
};

// Runs one collective over the sweep; adds the wrong elements to *wrong.
// `set`: the process set it runs over (nullptr: every rank); `root`: the
// broadcast root among its ranks.
Status runSweep(tutti::Runtime& runtime, Collective op, tutti::DataType dtype,
                tutti::ReduceOp reduce_op, const bench_sweep& sweep,
                const tutti::ProcessSetInfo* set, int root, bool ordered, int64_t* wrong) {
  const int32_t set_id = set ? set->id : tutti::kGlobalProcessSet;
  const int ranks = set ? set->size() : runtime.size();
  const bool reporter = set ? set->rankOf(runtime.rank()) == 0 : runtime.rank() == 0;
  int64_t last_bytes = -1;
  for (int64_t asked = sweep.min_bytes; asked <= sweep.max_bytes;
       asked = bench_next_size(&sweep, asked)) {
    CollectiveCase point(runtime, op, dtype, reduce_op, asked, set, root, ordered);
    if (point.bytes() == last_bytes) continue;  // rounded to the same size as the last point
    last_bytes = point.bytes();
    const std::string name = std::string("bench.") + collectiveName(op) + "." +
                             tutti::dataTypeName(dtype) + "." + std::to_string(point.bytes());
    const int iterations = bench_iterations(&sweep, point.bytes());
    const int warmups = bench_warmups(&sweep, point.bytes());
    for (int i = 0; i < warmups; ++i) TUTTI_RETURN_IF_ERROR(point.run(name, nullptr));
    std::vector<double> seconds(iterations);
    for (int i = 0; i < iterations; ++i) {
      const double start = bench_now_seconds();
      TUTTI_RETURN_IF_ERROR(point.run(name, nullptr));
      seconds[i] = bench_now_seconds() - start;
    }
    int64_t point_wrong = 0;
    if (sweep.check) TUTTI_RETURN_IF_ERROR(point.run(name, &point_wrong));
    TUTTI_RETURN_IF_ERROR(tutti::bench::maxOverRanks(runtime, name + ".times", &seconds, set_id));
    TUTTI_RETURN_IF_ERROR(
        tutti::bench::sumOverRanks(runtime, name + ".wrong", &point_wrong, set_id));
    *wrong += point_wrong;
    if (reporter) {
      const bench_stats stats = bench_summarize(seconds.data(), iterations);
      bench_print_row(point.bytes(), point.count(), tutti::dataTypeName(dtype),
                      point.reduceOpLabel(), collectiveName(op), ranks, stats.median,
                      sweep.check ? point_wrong : -1);
    }
  }
  return Status::ok();
}

// Every collective of `ops` over the world or o.process_set (registered
// here, collectively; non-members wait at the end).
Status runSweeps(tutti::Runtime& runtime, const std::vector<Collective>& ops, tutti::DataType dtype,
                 tutti::ReduceOp reduce_op, const Options& o, const std::string& details,
                 int64_t* wrong) {
  tutti::ProcessSetInfo set;
  const tutti::ProcessSetInfo* in_set = nullptr;
  if (!o.process_set.empty()) {
    int32_t id = 0;
    TUTTI_RETURN_IF_ERROR(runtime.addProcessSet(o.process_set, &id));
    TUTTI_RETURN_IF_ERROR(runtime.processSet(id, &set));
    in_set = &set;
  }
  const bool member = in_set == nullptr || set.rankOf(runtime.rank()) >= 0;
  if (member && (in_set ? set.rankOf(runtime.rank()) == 0 : runtime.rank() == 0)) {
    const std::string where = in_set ? details + ", process set " + std::to_string(set.id) +
                                           " of a world of " + std::to_string(runtime.size())
                                     : details;
    bench_print_header("tutti-bench", in_set ? set.size() : runtime.size(), where.c_str());
  }
  const int ranks = in_set ? set.size() : runtime.size();
  if (o.root >= ranks) {
    return Status::invalidArgument("--root " + std::to_string(o.root) + ": the " +
                                   (in_set ? "process set" : "world") + " has " +
                                   std::to_string(ranks) + " ranks (accepted: 0 to " +
                                   std::to_string(ranks - 1) + ")");
  }
  for (size_t k = 0; member && k < ops.size(); ++k) {
    TUTTI_RETURN_IF_ERROR(
        runSweep(runtime, ops[k], dtype, reduce_op, o.sweep, in_set, o.root, o.ordered, wrong));
  }
  if (in_set == nullptr) return Status::ok();
  // Everyone leaves together: a rank's shutdown stops the whole job.
  tutti::Handle done = 0;
  TUTTI_RETURN_IF_ERROR(runtime.barrier(&done));
  const Status st = runtime.wait(done);
  runtime.release(done);
  return st;
}

int fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "tutti-bench: %s: %s\n", what.c_str(), status.toString().c_str());
  return 1;
}

// The command line's options, bound to `o`; sizes stay strings for CLI11 and
// are parsed by bench_util (K/M/G suffixes) into `sizes` (min, max, per point).
void addOptions(CLI::App& app, Options& o, std::string (&sizes)[3]) {
  const auto size_check = [](const std::string& text) -> std::string {
    int64_t bytes = 0;
    return bench_parse_size(text.c_str(), &bytes) == 0 ? "" : "expected a size like 4, 64K, 1M, 2G";
  };
  app.add_option("-b,--minbytes", sizes[0], "smallest size (K/M/G suffixes)")->check(size_check);
  app.add_option("-e,--maxbytes", sizes[1], "largest size (K/M/G suffixes)")->check(size_check);
  app.add_option("-m,--bytes-per-point", sizes[2],
                 "cap big sizes at max(5, m / size) iterations (0: no cap)")
      ->check(size_check);
  app.add_option("-f,--stepfactor", o.sweep.factor, "size multiplication factor")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("-n,--iters", o.sweep.iterations, "timed iterations per size")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("-w,--warmup_iters", o.sweep.warmups, "untimed iterations per size")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("-c,--check", o.sweep.check, "check the results (0/1)")->check(CLI::Range(0, 1));
  app.add_option("-d,--datatype", o.dtype,
                 "uint8, int8, int16, int32, int64, float16, "
                 "bfloat16, float32, float64");
  app.add_option("-o,--reduce-op", o.reduce_op, "sum, avg, min, max, prod");
  app.add_option("--op", o.op, "allreduce, allgather, broadcast, reducescatter, alltoall, all");
  app.add_flag("--gradient-set", o.gradient_set,
               "allreduce ResNet-50's 161 gradients per step (-n steps, -w warm-ups)");
  app.add_option("--process-set", o.process_set,
                 "run over a process set of these global ranks (e.g. 0,1); the other ranks "
                 "only register it and wait")
      ->delimiter(',');
  app.add_flag("--ordered", o.ordered,
               "issue the collectives on the ordered lane (no negotiation; the same order on "
               "every rank, as torch.distributed does) instead of by name");
  app.add_option("--root", o.root,
                 "broadcast root: a rank of the world, or of the process set (its index "
                 "among the set's ranks); default 0")
      ->check(CLI::Range(0, 1 << 20));
}

// -d, -o and --op as values; false (after saying why) when one is not known.
bool parseChoices(const Options& o, tutti::DataType* dtype, tutti::ReduceOp* reduce_op,
                  std::vector<Collective>* ops) {
  const auto parsed = tutti::parseDataType(o.dtype);
  if (!parsed || *parsed == tutti::DataType::kBool) {
    std::fprintf(stderr, "tutti-bench: -d %s: unknown or unsupported dtype\n", o.dtype.c_str());
    return false;
  }
  *dtype = *parsed;
  if (!tutti::bench::parseReduceOp(o.reduce_op, reduce_op)) {
    std::fprintf(stderr, "tutti-bench: -o %s: expected sum, avg, min, max or prod\n",
                 o.reduce_op.c_str());
    return false;
  }
  Collective one;
  if (o.op == "all") {
    *ops = tutti::bench::allCollectives();
  } else if (tutti::bench::parseCollective(o.op, &one)) {
    *ops = {one};
  } else {
    std::fprintf(stderr, "tutti-bench: --op %s: unknown collective\n", o.op.c_str());
    return false;
  }
  return true;
}

// Starts the runtime, runs the benchmark and shuts down; main's exit code.
int runBenchmark(const Options& o, tutti::DataType dtype, tutti::ReduceOp reduce_op,
                 const std::vector<Collective>& ops) {
  tutti::Settings settings;
  Status status = tutti::loadSettings(tutti::processEnv(), &settings);
  if (!status.isOk()) return fail("settings", status);
  std::unique_ptr<tutti::Runtime> runtime;
  status = tutti::Runtime::create(settings, &runtime);
  if (!status.isOk()) return fail("init", status);

  const std::string details = "backend " + settings.backend + ", fusion threshold " +
                              std::to_string(settings.fusion_threshold_bytes) + " B";
  int64_t wrong = 0;
  if (o.gradient_set) {
    if (runtime->rank() == 0)
      bench_print_step_header("tutti-bench", runtime->size(), details.c_str());
    status = tutti::bench::runGradientSet(*runtime, o.sweep.iterations, o.sweep.warmups,
                                          o.sweep.check != 0, &wrong);
  } else {
    status = runSweeps(*runtime, ops, dtype, reduce_op, o, details, &wrong);
  }
  if (!status.isOk()) return fail("benchmark", status);
  status = runtime->shutdown();
  if (!status.isOk()) return fail("shutdown", status);
  if (wrong != 0) {
    if (runtime->rank() == 0)
      std::fprintf(stderr, "tutti-bench: %lld wrong elements\n", static_cast<long long>(wrong));
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"tutti-bench: collective benchmarks in the manner of nccl-tests"};
  std::string sizes[3] = {"32M", "32M", "0"};  // -b, -e, -m
  addOptions(app, o, sizes);
  CLI11_PARSE(app, argc, argv);
  bench_parse_size(sizes[0].c_str(), &o.sweep.min_bytes);
  bench_parse_size(sizes[1].c_str(), &o.sweep.max_bytes);
  bench_parse_size(sizes[2].c_str(), &o.sweep.bytes_per_point);
  if (bench_check_sweep(&o.sweep) != 0) return 2;
  tutti::DataType dtype;
  tutti::ReduceOp reduce_op;
  std::vector<Collective> ops;
  if (!parseChoices(o, &dtype, &reduce_op, &ops)) return 2;
  return runBenchmark(o, dtype, reduce_op, ops);
}

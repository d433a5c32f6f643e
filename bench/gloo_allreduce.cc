// gloo_allreduce: Gloo's C++ ring allreduces (float32 sum, in place: Gloo's
// algorithms reduce into their input buffers) over its TCP transport on
// loopback, beside tutti-bench. Same flags and table (bench_util.h), plus
//   -r rank  -s size  -p directory of the rendezvous FileStore (fresh per job)
//   -a ring | ring_chunked (default ring)
// The algorithm object is built once per size (its constructor connects and
// allocates; run() only moves bytes), as Gloo intends. With -c 1 the buffer
// is refilled and one more run is checked.
//
//   for r in 0 1; do gloo_allreduce -r $r -s 2 -p /tmp/g1 -b 4 -e 1M & done; wait

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"

namespace {

struct GlooOptions {
  int rank = -1;
  int size = 0;
  std::string store_path;
  std::string algorithm = "ring";
};

int onFlag(int flag, const char* value, void* ctx) {
  auto* o = static_cast<GlooOptions*>(ctx);
  switch (flag) {
    case 'r':
      o->rank = std::atoi(value);
      return 0;
    case 's':
      o->size = std::atoi(value);
      return 0;
    case 'p':
      o->store_path = value;
      return 0;
    case 'a':
      o->algorithm = value;
      return o->algorithm == "ring" || o->algorithm == "ring_chunked" ? 0 : -1;
  }
  return -1;
}

std::unique_ptr<gloo::Algorithm> makeAllreduce(const std::string& algorithm,
                                               const std::shared_ptr<gloo::Context>& context,
                                               float* data, int count) {
  if (algorithm == "ring_chunked") {
    return std::make_unique<gloo::AllreduceRingChunked<float>>(context, std::vector<float*>{data},
                                                               count);
  }
  return std::make_unique<gloo::AllreduceRing<float>>(context, std::vector<float*>{data}, count);
}

void fill(std::vector<float>* data, int rank) {
  for (size_t i = 0; i < data->size(); ++i) (*data)[i] = static_cast<float>(i % 7 + rank + 1);
}

}  // namespace

int main(int argc, char** argv) {
  GlooOptions o;
  bench_sweep sweep = bench_default_sweep();
  if (bench_parse_sweep(argc, argv, "r:s:p:a:", onFlag, &o, &sweep) != 0) return 2;
  if (o.rank < 0 || o.size < 1 || o.rank >= o.size || o.store_path.empty()) {
    std::fprintf(stderr, "gloo_allreduce: -r RANK -s SIZE -p STORE_DIR are required\n");
    return 2;
  }
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(o.store_path);
  auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
  context->connectFullMesh(store, device);
  if (o.rank == 0) {
    bench_print_header("gloo_allreduce", o.size, ("gloo::Allreduce" + o.algorithm).c_str());
  }
  int64_t total_wrong = 0;
  for (int64_t asked = sweep.min_bytes; asked <= sweep.max_bytes;
       asked = bench_next_size(&sweep, asked)) {
    const int64_t count = asked / 4 > 0 ? asked / 4 : 1;
    const int64_t bytes = count * 4;
    std::vector<float> data(count);
    fill(&data, o.rank);
    auto allreduce = makeAllreduce(o.algorithm, context, data.data(), static_cast<int>(count));
    const int iterations = bench_iterations(&sweep, bytes);
    const int warmups = bench_warmups(&sweep, bytes);
    std::vector<double> seconds(iterations);
    for (int i = -warmups; i < iterations; ++i) {
      const double start = bench_now_seconds();
      allreduce->run();
      if (i >= 0) seconds[i] = bench_now_seconds() - start;
    }
    double wrong = 0;
    if (sweep.check) {
      fill(&data, o.rank);
      allreduce->run();
      for (int64_t i = 0; i < count; ++i) {
        wrong += data[i] != static_cast<float>(o.size * (i % 7 + 1) + o.size * (o.size - 1) / 2);
      }
      gloo::AllreduceRing<double>(context, {&wrong}, 1).run();
      total_wrong += static_cast<int64_t>(wrong);
    }
    gloo::AllreduceRing<double>(context, {seconds.data()}, iterations,
                                gloo::ReductionFunction<double>::max)
        .run();
    if (o.rank == 0) {
      bench_print_row(bytes, count, "float32", "sum", "allreduce", o.size,
                      bench_summarize(seconds.data(), iterations).median,
                      sweep.check ? static_cast<int64_t>(wrong) : -1);
    }
  }
  return total_wrong != 0;
}

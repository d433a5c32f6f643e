#include "bench/gradient_set.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/collective_case.h"
#include "bench/resnet50_shapes.h"

namespace tutti::bench {
namespace {

std::string strategyName(int64_t fusion_threshold_bytes) {
  if (fusion_threshold_bytes == 0) return "tutti-fusion-off";
  if (fusion_threshold_bytes % (1 << 20) == 0) {
    return "tutti-fusion-" + std::to_string(fusion_threshold_bytes >> 20) + "MiB";
  }
  return "tutti-fusion-" + std::to_string(fusion_threshold_bytes) + "B";
}

Status barrier(Runtime& runtime) {
  Handle handle = 0;
  TUTTI_RETURN_IF_ERROR(runtime.barrier(&handle));
  const Status status = runtime.wait(handle);
  runtime.release(handle);
  return status;
}

}  // namespace

Status runGradientSet(Runtime& runtime, int steps, int warmups, bool check, int64_t* wrong) {
  const int ranks = runtime.size();
  std::vector<std::vector<float>> grads(RESNET50_NUM_PARAMS);
  std::vector<TensorView> views(RESNET50_NUM_PARAMS);
  std::vector<std::string> names(RESNET50_NUM_PARAMS);
  for (int i = 0; i < RESNET50_NUM_PARAMS; ++i) {
    const resnet50_param& p = kResnet50Params[i];
    grads[i].resize(static_cast<size_t>(resnet50_param_elements(i)));
    views[i] = TensorView{grads[i].data(), DataType::kFloat32, Shape(p.dims, p.dims + p.ndim)};
    names[i] = std::string("grad.") + p.name;
  }
  const float expected = static_cast<float>(ranks) * (ranks + 1) / 2;
  std::vector<double> seconds;
  std::vector<Handle> handles(RESNET50_NUM_PARAMS);
  int64_t wrong_here = 0;
  OpOptions options;         // compression: the job's TUTTI_COMPRESSION
  uint64_t bytes_timed = 0;  // this rank's bytes on the wire over the timed steps
  for (int step = -warmups; step < steps; ++step) {
    for (auto& g : grads) std::fill(g.begin(), g.end(), static_cast<float>(runtime.rank() + 1));
    TUTTI_RETURN_IF_ERROR(barrier(runtime));
    const uint64_t bytes_before = runtime.bytesSent();
    const double start = bench_now_seconds();
    for (int i = RESNET50_NUM_PARAMS - 1; i >= 0; --i) {  // backward order
      options.name = names[i];
      TUTTI_RETURN_IF_ERROR(runtime.allreduce(views[i], views[i], options, &handles[i]));
    }
    Status status;
    for (int i = RESNET50_NUM_PARAMS - 1; i >= 0; --i) {
      const Status s = runtime.wait(handles[i]);
      if (status.isOk()) status = s;
    }
    const double elapsed = bench_now_seconds() - start;
    for (Handle h : handles) runtime.release(h);
    TUTTI_RETURN_IF_ERROR(status);
    if (step >= 0) {
      seconds.push_back(elapsed);
      bytes_timed += runtime.bytesSent() - bytes_before;
    }
    if (check) {
      for (const auto& g : grads)
        wrong_here += std::count_if(g.begin(), g.end(), [&](float v) { return v != expected; });
    }
  }
  TUTTI_RETURN_IF_ERROR(maxOverRanks(runtime, "bench.gradset.times", &seconds));
  *wrong = wrong_here;
  TUTTI_RETURN_IF_ERROR(sumOverRanks(runtime, "bench.gradset.wrong", wrong));
  if (runtime.rank() == 0) {
    const std::string strategy = strategyName(runtime.settings().fusion_threshold_bytes);
    bench_print_step(strategy.c_str(), RESNET50_NUM_PARAMS,
                     RESNET50_TOTAL_ELEMENTS * static_cast<int64_t>(sizeof(float)),
                     bench_summarize(seconds.data(), static_cast<int>(seconds.size())));
    std::printf("# gradset compression %s: %llu bytes sent per step by rank 0\n",
                runtime.settings().compression.c_str(),
                static_cast<unsigned long long>(bytes_timed / std::max<size_t>(1, seconds.size())));
  }
  return Status::ok();
}

}  // namespace tutti::bench

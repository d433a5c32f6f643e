// gpu_busbw: allreduce bus bandwidth on CUDA tensors, in the manner of
// nccl-tests, plus the device's own copy bandwidth as the physical reference.
//
//   tuttirun -np 1 --backend nccl gpu_busbw     # NCCL through the runtime
//   TUTTI_BACKEND=tcp tuttirun -np 4 gpu_busbw  # 4 ranks staged through host memory
//
// Each size from --min-bytes to --max-bytes (times 4) runs --warmup untimed and
// --iters timed float32 sum allreduces (out of place: enqueue, then wait),
// under one name per size. A row: size, count, time (µs: mean over the
// iterations of the slowest rank), algbw = bytes / time and busbw = algbw *
// 2 (n - 1) / n (GB/s, nccl-tests' definitions), and #wrong: elements of the
// last result that differ from n (n + 1) / 2 (the worst rank's count). Rank 0 first
// prints the device-to-device cudaMemcpy bandwidth of its GPU. Exits 1 when
// any #wrong is not 0 or an op fails. Settings come from the TUTTI_* environment.
// --compression fp16|bf16 casts on the device around a 16-bit allreduce
// (coordinator/device_executor.h); the sums of small integers stay exact, so
// #wrong is still 0; algbw and busbw count the float32 bytes of the tensor.

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

bool cudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_busbw: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Slowest rank's value (allreduce max of one double on the CPU).
double slowest(tutti::Runtime& rt, double mine, const std::string& name) {
  tutti::TensorView v{&mine, tutti::DataType::kFloat64, {1}};
  tutti::OpOptions o;
  o.name = name;
  o.reduce_op = tutti::ReduceOp::kMax;
  tutti::Handle h = 0;
  if (!rt.allreduce(v, v, o, &h).isOk() || !rt.wait(h).isOk()) return -1;
  rt.release(h);
  return mine;
}

double copyBandwidth(size_t bytes) {
  void *a = nullptr, *b = nullptr;
  if (!cudaOk(cudaMalloc(&a, bytes), "cudaMalloc") || !cudaOk(cudaMalloc(&b, bytes), "cudaMalloc"))
    return 0;
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
  const int iters = 20;
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * iters / s / 1e9;  // read + write
}

struct Args {
  size_t min_bytes = size_t{1} << 20, max_bytes = size_t{256} << 20;
  int iters = 20, warmup = 5;
  std::string compression;  // "": the job's default (TUTTI_COMPRESSION)
};

// False (after printing the usage) on an unknown flag or value.
bool parseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const size_t value = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--compression" &&
        (std::strcmp(argv[i + 1], "none") == 0 || std::strcmp(argv[i + 1], "fp16") == 0 ||
         std::strcmp(argv[i + 1], "bf16") == 0)) {
      args->compression = argv[i + 1];
    } else if (flag == "--min-bytes")
      args->min_bytes = value;
    else if (flag == "--max-bytes")
      args->max_bytes = value;
    else if (flag == "--iters")
      args->iters = static_cast<int>(value);
    else if (flag == "--warmup")
      args->warmup = static_cast<int>(value);
    else {
      std::fprintf(stderr,
                   "usage: gpu_busbw [--min-bytes N] [--max-bytes N] [--iters N] "
                   "[--warmup N] [--compression none|fp16|bf16]\n");
      return false;
    }
  }
  return true;
}

// The runtime from the TUTTI_* environment; null (after printing why) on failure.
std::unique_ptr<tutti::Runtime> openRuntime() {
  tutti::Settings settings;
  tutti::Status st = tutti::loadSettings(tutti::processEnv(), &settings);
  std::unique_ptr<tutti::Runtime> rt;
  if (st.isOk()) st = tutti::Runtime::create(settings, &rt);
  if (!st.isOk()) {
    std::fprintf(stderr, "gpu_busbw: %s\n", st.toString().c_str());
    return nullptr;
  }
  return rt;
}

void printHeader(tutti::Runtime& rt, const Args& args, int device, int devices) {
  std::printf("# gpu_busbw: %d rank(s), backend %s, device %d of %d, compression %s\n", rt.size(),
              rt.settings().backend.c_str(), device, devices,
              args.compression.empty() ? "(job default)" : args.compression.c_str());
  std::printf("# device-to-device cudaMemcpy: %.1f GB/s (read + write)\n",
              copyBandwidth(args.max_bytes));
  std::printf("# %12s %12s %10s %10s %10s %8s\n", "size(B)", "count", "time(us)", "algbw", "busbw",
              "#wrong");
}

// Seconds of the timed iterations (warmup excluded) of `o` from `vin` into
// `vout`; sets *failed (after printing why) when an op fails, and stops.
double timeAllreduces(tutti::Runtime& rt, const tutti::TensorView& vin,
                      const tutti::TensorView& vout, const tutti::OpOptions& o, const Args& args,
                      bool* failed) {
  double seconds = 0;
  for (int i = 0; i < args.warmup + args.iters && !*failed; ++i) {
    tutti::Handle h = 0;
    const auto start = Clock::now();
    tutti::Status st = rt.allreduce(vin, vout, o, &h);
    if (st.isOk()) st = rt.wait(h);
    if (i >= args.warmup) seconds += std::chrono::duration<double>(Clock::now() - start).count();
    if (!st.isOk()) {
      std::fprintf(stderr, "gpu_busbw: rank %d: %s\n", rt.rank(), st.toString().c_str());
      *failed = true;
    }
  }
  return seconds;
}

// One row: `bytes` of float32 allreduced; adds the worst rank's #wrong to
// *total_wrong. False when device memory cannot be had.
bool runSize(tutti::Runtime& rt, const Args& args, size_t bytes, int device, int64_t* total_wrong,
             bool* failed) {
  const int rank = rt.rank(), n = rt.size();
  const size_t count = bytes / sizeof(float);
  void *in = nullptr, *out = nullptr;
  if (!cudaOk(cudaMalloc(&in, bytes), "cudaMalloc") ||
      !cudaOk(cudaMalloc(&out, bytes), "cudaMalloc")) {
    return false;
  }
  std::vector<float> host(count, static_cast<float>(rank + 1));
  cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice);
  const tutti::Shape shape = {static_cast<int64_t>(count)};
  tutti::TensorView vin{in, tutti::DataType::kFloat32, shape, tutti::DeviceType::kCuda, device};
  tutti::TensorView vout{out, tutti::DataType::kFloat32, shape, tutti::DeviceType::kCuda, device};
  tutti::OpOptions o;
  o.name = "busbw." + std::to_string(bytes);
  o.compression = args.compression;
  const double seconds = timeAllreduces(rt, vin, vout, o, args, failed);
  cudaMemcpy(host.data(), out, bytes, cudaMemcpyDeviceToHost);
  const float expect = static_cast<float>(n * (n + 1) / 2);
  int64_t wrong = 0;
  for (float v : host) wrong += v != expect;
  const double wrong_all = slowest(rt, static_cast<double>(wrong), o.name + ".wrong");
  const double time = slowest(rt, seconds / args.iters, o.name + ".time");
  *total_wrong += static_cast<int64_t>(wrong_all > 0 ? wrong_all : 0);
  if (rank == 0) {
    const double algbw = bytes / time / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    std::printf("  %12zu %12zu %10.1f %10.2f %10.2f %8lld\n", bytes, count, time * 1e6, algbw,
                busbw, static_cast<long long>(wrong_all));
    std::fflush(stdout);
  }
  cudaFree(in);
  cudaFree(out);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parseArgs(argc, argv, &args)) return 2;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gpu_busbw: no CUDA device\n");
    return 77;
  }
  std::unique_ptr<tutti::Runtime> rt = openRuntime();
  if (!rt) return 1;
  const int device = rt->localRank() % devices;
  if (!cudaOk(cudaSetDevice(device), "cudaSetDevice")) return 1;
  if (rt->rank() == 0) printHeader(*rt, args, device, devices);
  int64_t total_wrong = 0;
  bool failed = false;
  for (size_t bytes = args.min_bytes; bytes <= args.max_bytes && !failed; bytes *= 4) {
    if (!runSize(*rt, args, bytes, device, &total_wrong, &failed)) return 1;
  }
  rt->shutdown();
  return failed || total_wrong != 0 ? 1 : 0;
}

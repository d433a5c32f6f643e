// The device executor's logic without a GPU: "CUDA" tensors live in host
// memory and the device context is tests/support/host_device_context (host
// arithmetic that the CUDA kernels match bit for bit, checked on a GPU by
// GpuKernelsTest). A compressed allreduce of CUDA tensors must give, bit for
// bit, what the host path gives for the same inputs, send the same bytes and
// keep the same error-feedback residuals; fp16/bf16 must cast on the device
// (and reduce the 16-bit buffer, staged or on a direct device backend), top-k
// and int8 must go through the host stage. Ranks are threads over
// tests/support/memory_transport.

#include "coordinator/device_executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "coordinator/executor.h"
#include "ops/tcp/tcp_backend.h"
#include "tests/support/host_device_context.h"
#include "tests/support/memory_transport.h"

namespace tutti {
namespace {

using testing::HostDeviceContext;
using testing::MemoryTransport;
using testing::MemoryWorld;

// A DeviceBackend (NCCL's place) that reduces host memory with the ring of
// TcpBackend, recording the dtypes it was asked to allreduce.
class RecordingDirectBackend : public DeviceBackend {
 public:
  explicit RecordingDirectBackend(Transport& transport) : inner_(transport, 4096) {}
  const char* name() const override { return "direct"; }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  bool reduces(DataType dtype) const override { return dtype != DataType::kInt16; }
  Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    reduced.push_back(dtype);
    return inner_.allreduce(buf, count, dtype, op);
  }
  Status allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                             ReduceOp op) override {
    reduced.push_back(dtype);
    return inner_.allreduceOutOfPlace(in, out, count, dtype, op);
  }
  Status allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    return inner_.allgatherv(in, out, bytes);
  }
  Status broadcast(void* buf, size_t bytes, int root) override {
    return inner_.broadcast(buf, bytes, root);
  }
  Status alltoallv(const void* in, const std::vector<size_t>& send, void* out,
                   const std::vector<size_t>& recv) override {
    return inner_.alltoallv(in, send, out, recv);
  }
  Status reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    return inner_.reducescatter(in, out, counts, dtype, op);
  }
  Status barrier() override { return inner_.barrier(); }

  std::vector<DataType> reduced;

 private:
  TcpBackend inner_;
};

// One allreduce: its response and every rank's inputs (null: the rank joined).
struct Op {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0, postscale = 1.0;
  int joined_rank = -1;  // this rank has no entry for names[joined_tensor]
  size_t joined_tensor = 0;
};

// Values like gradients (several orders of magnitude), in `dtype`.
std::vector<uint8_t> gradient(DataType dtype, int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-4.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(count));
  for (float& x : f) x = normal(gen) * std::pow(10.0f, exponent(gen));
  std::vector<uint8_t> out(f.size() * dataTypeSize(dtype));
  if (dtype == DataType::kInt32) {
    for (size_t i = 0; i < f.size(); ++i) {
      const auto v = static_cast<int32_t>(f[i] * 1000.0f);
      std::memcpy(out.data() + 4 * i, &v, 4);
    }
  } else {
    fromFloat32(f.data(), f.size(), dtype, out.data());
  }
  return out;
}

// Runs `op` on one executor (CPU or "CUDA" tensors); returns this rank's
// outputs, concatenated.
std::vector<uint8_t> runOp(Executor& executor, const Op& op, const std::string& spec,
                           DeviceType device, int rank, uint32_t seed) {
  Response r;
  r.type = OpType::kAllreduce;
  r.names = op.names;
  r.sizes = op.sizes;
  r.dtype = op.dtype;
  r.reduce_op = op.reduce_op;
  r.prescale = op.prescale;
  r.postscale = op.postscale;
  r.device = device;
  r.compression = spec;
  std::vector<std::vector<uint8_t>> inputs, outputs;
  std::vector<TensorEntry> entries(op.names.size());
  std::vector<const TensorEntry*> pointers;
  for (size_t i = 0; i < op.names.size(); ++i) {
    inputs.push_back(gradient(op.dtype, op.sizes[i], seed + 7919 * static_cast<uint32_t>(i)));
    outputs.emplace_back(inputs.back().size(), 0xEE);
    for (TensorView* v : {&entries[i].input, &entries[i].output}) {
      v->data = v == &entries[i].input ? inputs[i].data() : outputs[i].data();
      v->dtype = op.dtype;
      v->shape = {op.sizes[i]};
      v->device = device;
      v->device_id = device == DeviceType::kCuda ? 0 : -1;
    }
    const bool joined = rank == op.joined_rank && i == op.joined_tensor;
    pointers.push_back(joined ? nullptr : &entries[i]);
  }
  std::vector<Completion> done;
  const Status st = executor.execute(r, pointers, &done);
  EXPECT_TRUE(st.isOk()) << spec << " " << op.names[0]
                         << (device == DeviceType::kCuda ? " cuda" : " cpu") << " rank " << rank
                         << ": " << st.toString();
  std::vector<uint8_t> all;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (pointers[i] != nullptr) all.insert(all.end(), outputs[i].begin(), outputs[i].end());
  }
  return all;
}

std::vector<Op> steps() {
  std::vector<Op> ops;
  // A fused float32 group, three times (error feedback carries over).
  for (int s = 0; s < 3; ++s) {
    Op fused;
    fused.names = {"a", "b", "empty", "c"};
    fused.sizes = {1000, 7, 0, 4099};
    fused.reduce_op = s == 1 ? ReduceOp::kAverage : ReduceOp::kSum;
    if (s == 2) {
      fused.joined_rank = 1;  // rank 1 joined: zeros for "b"
      fused.joined_tensor = 1;
    }
    ops.push_back(fused);
  }
  // A lone tensor with pre- and postscale, averaged.
  Op lone;
  lone.names = {"lone"};
  lone.sizes = {5003};
  lone.reduce_op = ReduceOp::kAverage;
  lone.prescale = 0.5;
  lone.postscale = 3.0;
  ops.push_back(lone);
  // An empty tensor alone.
  Op empty;
  empty.names = {"nothing"};
  empty.sizes = {0};
  ops.push_back(empty);
  // float64 (casts go through float32) and float16 tensors (top-k, int8).
  Op wide;
  wide.names = {"d64"};
  wide.sizes = {777};
  wide.dtype = DataType::kFloat64;
  ops.push_back(wide);
  Op narrow;
  narrow.names = {"h16", "h16b"};
  narrow.sizes = {300, 301};
  narrow.dtype = DataType::kFloat16;
  ops.push_back(narrow);
  // Integers pass through uncompressed.
  Op ints;
  ints.names = {"i32"};
  ints.sizes = {33};
  ints.dtype = DataType::kInt32;
  ops.push_back(ints);
  return ops;
}

// One rank's two executors over the same host backend: `on_host` runs CPU
// tensors, `on_device` runs "CUDA" tensors through a DeviceExecutor on a
// HostDeviceContext and, when `direct`, a RecordingDirectBackend. Not movable:
// the bundle's factories record into this object.
struct RankExecutors {
  RankExecutors(MemoryTransport& tr, int n, bool direct)
      : rank(tr.rank()),
        host(tr, 4096),
        on_host(host, rank, n, &host_state),
        on_device(host, rank, n, &device_state) {
    bundle.open_device = [this](int, std::unique_ptr<DeviceContext>* out) {
      auto c = std::make_unique<HostDeviceContext>();
      ctx = c.get();
      *out = std::move(c);
      return Status::ok();
    };
    if (direct) {
      bundle.connect_device_backend = [this, &tr](DeviceContext&,
                                                  std::unique_ptr<DeviceBackend>* out) {
        auto b = std::make_unique<RecordingDirectBackend>(tr);
        direct_backend = b.get();
        *out = std::move(b);
        return Status::ok();
      };
    }
    device = std::make_unique<DeviceExecutor>(bundle, rank, n);
    on_device.setDeviceExecutor(device.get());
  }
  RankExecutors(const RankExecutors&) = delete;
  RankExecutors& operator=(const RankExecutors&) = delete;

  const int rank;
  TcpBackend host;
  ExecutorState host_state, device_state;
  Executor on_host;
  Executor on_device;
  HostDeviceContext* ctx = nullptr;
  RecordingDirectBackend* direct_backend = nullptr;
  BackendBundle bundle;
  std::unique_ptr<DeviceExecutor> device;
};

// The counters one op moves, read before it runs.
struct Counters {
  uint64_t host_bytes, device_bytes;
  size_t direct_calls;
  uint64_t staged;
};

Counters readCounters(const RankExecutors& x) {
  return {x.host_state.bytes_sent.load(), x.device_state.bytes_sent.load(),
          x.direct_backend ? x.direct_backend->reduced.size() : 0,
          x.ctx != nullptr ? x.ctx->stagedBytes() : 0};
}

// How one op of the sequence must travel for `spec`.
struct Route {
  bool casts;          // cast on the device (fp16/bf16 of float32/float64)
  bool on_host_stage;  // top-k, int8 of floating tensors
  int64_t total;       // elements over the op's tensors
};

Route routeOf(const Op& op, const std::string& spec) {
  const bool cast = spec == "fp16" || spec == "bf16";
  const bool compressed = spec != "none";
  const bool floating = op.dtype != DataType::kInt32;
  const bool wide = op.dtype == DataType::kFloat32 || op.dtype == DataType::kFloat64;
  int64_t total = 0;
  for (int64_t size : op.sizes) total += size;
  return {cast && wide, compressed && !cast && floating, total};
}

// The bytes sent and staged and the direct backend's reductions for one op.
void checkTraffic(const RankExecutors& x, const Op& op, const std::string& spec, bool direct,
                  const Counters& before, const std::string& what) {
  const Route route = routeOf(op, spec);
  const uint64_t sent_for_host = x.host_state.bytes_sent.load() - before.host_bytes;
  const uint64_t sent_for_device = x.device_state.bytes_sent.load() - before.device_bytes;
  if (!direct || route.on_host_stage) {
    // Through the host backend: the same bytes as for CPU tensors (half
    // of float32's for the casts, the packed chunks for top-k and int8).
    EXPECT_EQ(sent_for_device, sent_for_host) << what;
  } else {
    EXPECT_EQ(sent_for_device, 0u) << what;  // on the device backend
  }
  // Bytes copied from the device to pinned memory: 16 bits per element
  // for the casts when staged, the tensors' own size for the host stage
  // and for uncompressed staged ops, nothing when the device backend
  // reduces.
  const uint64_t staged = x.ctx->stagedBytes() - before.staged;
  const uint64_t tensor_bytes = static_cast<uint64_t>(route.total) * dataTypeSize(op.dtype);
  if (route.casts) {
    EXPECT_EQ(staged, direct ? 0u : 2u * static_cast<uint64_t>(route.total)) << what;
  } else if (route.on_host_stage || !direct) {
    EXPECT_EQ(staged, tensor_bytes) << what;
  } else {
    EXPECT_EQ(staged, 0u) << what;
  }
  if (direct) {
    std::vector<DataType> calls(x.direct_backend->reduced.begin() + before.direct_calls,
                                x.direct_backend->reduced.end());
    if (route.casts) {
      // One reduction of the 16-bit buffer.
      const DataType wire = spec == "fp16" ? DataType::kFloat16 : DataType::kBFloat16;
      EXPECT_EQ(calls, std::vector<DataType>{wire}) << what;
    } else if (route.on_host_stage) {
      EXPECT_TRUE(calls.empty()) << what;
    } else {
      EXPECT_EQ(calls, std::vector<DataType>{op.dtype}) << what;
    }
  }
}

// Runs op `k` on CPU and on "CUDA" tensors: the same bytes out, and the
// traffic its route implies. Adds what the fp16/bf16 path must have cast.
void checkOp(RankExecutors& x, const Op& op, size_t k, const std::string& spec, int n, bool direct,
             uint64_t* cast_elements) {
  const int rank = x.rank;
  const std::string what = spec + " op " + std::to_string(k) + " (" + op.names[0] + ", " +
                           dataTypeName(op.dtype) + ") rank " + std::to_string(rank) + " of " +
                           std::to_string(n) + (direct ? " direct" : " staged");
  const uint32_t seed = 1000u * static_cast<uint32_t>(rank) + 17u * static_cast<uint32_t>(k);
  const Counters before = readCounters(x);
  const std::vector<uint8_t> want = runOp(x.on_host, op, spec, DeviceType::kCpu, rank, seed);
  const std::vector<uint8_t> got = runOp(x.on_device, op, spec, DeviceType::kCuda, rank, seed);
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << what;
  const Route route = routeOf(op, spec);
  if (route.casts) *cast_elements += 2 * static_cast<uint64_t>(route.total);  // to 16 bits and back
  checkTraffic(x, op, spec, direct, before, what);
}

using Param = std::tuple<std::string, int, bool>;  // spec, ranks, direct device backend

class DeviceCompressionTest : public ::testing::TestWithParam<Param> {};

TEST_P(DeviceCompressionTest, CudaTensorsGiveTheHostPathsResults) {
  const auto& [spec, n, direct] = GetParam();
  MemoryWorld world(n);
  world.run([&, spec = spec, n = n, direct = direct](MemoryTransport& tr) {
    RankExecutors x(tr, n, direct);
    uint64_t cast_elements = 0;  // what the fp16/bf16 path must have cast
    const std::vector<Op> ops = steps();
    for (size_t k = 0; k < ops.size(); ++k) {
      ASSERT_NO_FATAL_FAILURE(checkOp(x, ops[k], k, spec, n, direct, &cast_elements));
    }
    ASSERT_NE(x.ctx, nullptr);
    // Casts run on the device context, only for fp16/bf16 and float tensors.
    EXPECT_EQ(x.ctx->castElements(), cast_elements) << spec;
    // Error-feedback state is the same host state as for CPU tensors.
    EXPECT_EQ(x.device_state.compressors.residuals(), x.host_state.compressors.residuals()) << spec;
    if (spec == "topk:0.01" || spec == "int8") {
      EXPECT_FALSE(x.device_state.compressors.residuals().empty()) << spec;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Specs, DeviceCompressionTest,
                         ::testing::Combine(::testing::Values("none", "fp16", "bf16", "topk:0.01",
                                                              "int8"),
                                            ::testing::Values(2, 3), ::testing::Bool()),
                         [](const auto& info) {
                           std::string spec = std::get<0>(info.param);
                           for (char& c : spec) {
                             if (c == ':' || c == '.') c = '_';
                           }
                           return spec + "_np" + std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_direct" : "_staged");
                         });

}  // namespace
}  // namespace tutti

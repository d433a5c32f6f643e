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

using Param = std::tuple<std::string, int, bool>;  // spec, ranks, direct device backend

class DeviceCompressionTest : public ::testing::TestWithParam<Param> {};

TEST_P(DeviceCompressionTest, CudaTensorsGiveTheHostPathsResults) {
  const auto& [spec, n, direct] = GetParam();
  const bool cast = spec == "fp16" || spec == "bf16";
  const bool compressed = spec != "none";
  MemoryWorld world(n);
  world.run([&, spec = spec, n = n, direct = direct](MemoryTransport& tr) {
    const int rank = tr.rank();
    TcpBackend host(tr, 4096);
    ExecutorState host_state, device_state;
    Executor on_host(host, rank, n, &host_state);
    Executor on_device(host, rank, n, &device_state);
    HostDeviceContext* ctx = nullptr;
    RecordingDirectBackend* direct_backend = nullptr;
    BackendBundle bundle;
    bundle.open_device = [&](int, std::unique_ptr<DeviceContext>* out) {
      auto c = std::make_unique<HostDeviceContext>();
      ctx = c.get();
      *out = std::move(c);
      return Status::ok();
    };
    if (direct) {
      bundle.connect_device_backend = [&](DeviceContext&, std::unique_ptr<DeviceBackend>* out) {
        auto b = std::make_unique<RecordingDirectBackend>(tr);
        direct_backend = b.get();
        *out = std::move(b);
        return Status::ok();
      };
    }
    DeviceExecutor device(bundle, rank, n);
    on_device.setDeviceExecutor(&device);

    uint64_t cast_elements = 0;  // what the fp16/bf16 path must have cast
    const std::vector<Op> ops = steps();
    for (size_t k = 0; k < ops.size(); ++k) {
      const Op& op = ops[k];
      const std::string what = spec + " op " + std::to_string(k) + " (" + op.names[0] + ", " +
                               dataTypeName(op.dtype) + ") rank " + std::to_string(rank) + " of " +
                               std::to_string(n) + (direct ? " direct" : " staged");
      const uint32_t seed = 1000u * static_cast<uint32_t>(rank) + 17u * static_cast<uint32_t>(k);
      const uint64_t host_bytes = host_state.bytes_sent.load();
      const uint64_t device_bytes = device_state.bytes_sent.load();
      const size_t direct_calls = direct_backend ? direct_backend->reduced.size() : 0;
      const uint64_t staged_before = ctx != nullptr ? ctx->stagedBytes() : 0;
      const std::vector<uint8_t> want = runOp(on_host, op, spec, DeviceType::kCpu, rank, seed);
      const std::vector<uint8_t> got = runOp(on_device, op, spec, DeviceType::kCuda, rank, seed);
      ASSERT_EQ(got.size(), want.size()) << what;
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << what;

      const bool floating = op.dtype != DataType::kInt32;
      const bool wide = op.dtype == DataType::kFloat32 || op.dtype == DataType::kFloat64;
      const bool casts = cast && wide;                             // cast on the device
      const bool on_host_stage = compressed && !cast && floating;  // top-k, int8
      int64_t total = 0;
      for (int64_t size : op.sizes) total += size;
      if (casts) cast_elements += 2 * static_cast<uint64_t>(total);  // to 16 bits and back
      const uint64_t sent_for_host = host_state.bytes_sent.load() - host_bytes;
      const uint64_t sent_for_device = device_state.bytes_sent.load() - device_bytes;
      if (!direct || on_host_stage) {
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
      const uint64_t staged = ctx->stagedBytes() - staged_before;
      const uint64_t tensor_bytes = static_cast<uint64_t>(total) * dataTypeSize(op.dtype);
      if (casts) {
        EXPECT_EQ(staged, direct ? 0u : 2u * static_cast<uint64_t>(total)) << what;
      } else if (on_host_stage || !direct) {
        EXPECT_EQ(staged, tensor_bytes) << what;
      } else {
        EXPECT_EQ(staged, 0u) << what;
      }
      if (direct) {
        std::vector<DataType> calls(direct_backend->reduced.begin() + direct_calls,
                                    direct_backend->reduced.end());
        if (casts) {
          // One reduction of the 16-bit buffer.
          const DataType wire = spec == "fp16" ? DataType::kFloat16 : DataType::kBFloat16;
          EXPECT_EQ(calls, std::vector<DataType>{wire}) << what;
        } else if (on_host_stage) {
          EXPECT_TRUE(calls.empty()) << what;
        } else {
          EXPECT_EQ(calls, std::vector<DataType>{op.dtype}) << what;
        }
      }
    }
    ASSERT_NE(ctx, nullptr);
    // Casts run on the device context, only for fp16/bf16 and float tensors.
    EXPECT_EQ(ctx->castElements(), cast_elements) << spec;
    // Error-feedback state is the same host state as for CPU tensors.
    EXPECT_EQ(device_state.compressors.residuals(), host_state.compressors.residuals()) << spec;
    if (spec == "topk:0.01" || spec == "int8") {
      EXPECT_FALSE(device_state.compressors.residuals().empty()) << spec;
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

// Process sets and Adasum on CUDA tensors without a GPU: "CUDA" tensors live
// in host memory and the device context is tests/support/host_device_context
// (host arithmetic that the CUDA kernels match bit for bit, checked on a GPU
// by GpuKernelsTest). What runs here is the device executor's logic: a set's
// device backend (NCCL's place, a fake over the set's members) is opened at
// the set's first op, by its members only, once, over the set's host backend,
// and freed when the set is removed; results over a set equal references
// computed here from every member's inputs; Adasum on CUDA tensors is staged
// through the host Adasum and equals it bit for bit. The real NCCL path runs
// in tutti_gpu_tests (GpuProcessSetsTest, scripts/device-check).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/device_backend_sets.h"
#include "coordinator/device_executor.h"
#include "coordinator/executor.h"
#include "ops/subset_transport.h"
#include "ops/tcp/tcp_backend.h"
#include "tests/support/host_device_context.h"
#include "tests/support/memory_transport.h"

namespace tutti {
namespace {

using testing::HostDeviceContext;
using testing::MemoryTransport;
using testing::MemoryWorld;

// A device backend that only counts how many of it are alive.
class CountedBackend : public DeviceBackend {
 public:
  explicit CountedBackend(int* live) : live_(live) { ++*live_; }
  ~CountedBackend() override { --*live_; }
  const char* name() const override { return "counted"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool reduces(DataType) const override { return true; }
  Status allreduce(void*, size_t, DataType, ReduceOp) override { return Status::ok(); }
  Status allgatherv(const void*, void*, const std::vector<size_t>&) override {
    return Status::ok();
  }
  Status broadcast(void*, size_t, int) override { return Status::ok(); }
  Status alltoallv(const void*, const std::vector<size_t>&, void*,
                   const std::vector<size_t>&) override {
    return Status::ok();
  }
  Status reducescatter(const void*, void*, const std::vector<size_t>&, DataType,
                       ReduceOp) override {
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }

 private:
  int* live_;
};

TEST(DeviceBackendSetsTest, OpensOncePerSetAndFreesOnRemoval) {
  int live = 0, opened = 0;
  DeviceBackendSets sets;
  auto factory = [&](std::unique_ptr<DeviceBackend>* out) {
    ++opened;
    *out = std::make_unique<CountedBackend>(&live);
    return Status::ok();
  };
  EXPECT_FALSE(sets.isOpen(1));
  DeviceBackend* a = nullptr;
  DeviceBackend* again = nullptr;
  DeviceBackend* b = nullptr;
  ASSERT_TRUE(sets.get(1, factory, &a).isOk());
  ASSERT_TRUE(sets.get(1, factory, &again).isOk());
  EXPECT_EQ(a, again);
  EXPECT_EQ(opened, 1);
  ASSERT_TRUE(sets.get(2, factory, &b).isOk());
  EXPECT_NE(a, b);
  EXPECT_EQ(opened, 2);
  EXPECT_EQ(live, 2);
  EXPECT_EQ(sets.openCount(), 2u);

  EXPECT_TRUE(sets.remove(1));
  EXPECT_EQ(live, 1);
  EXPECT_FALSE(sets.isOpen(1));
  EXPECT_FALSE(sets.remove(1));  // already gone
  EXPECT_FALSE(sets.remove(7));  // never opened (a rank outside set 7)
  // A set opened again after its removal gets a new backend.
  ASSERT_TRUE(sets.get(1, factory, &a).isOk());
  EXPECT_EQ(opened, 3);
  EXPECT_EQ(live, 2);
  sets.clear();
  EXPECT_EQ(live, 0);
}

TEST(DeviceBackendSetsTest, AFailedOpeningIsNotKept) {
  int live = 0, calls = 0;
  DeviceBackendSets sets;
  DeviceBackend* out = nullptr;
  Status st = sets.get(
      3,
      [&](std::unique_ptr<DeviceBackend>*) {
        ++calls;
        return Status::peerLost("ncclCommInitRankConfig timed out");
      },
      &out);
  EXPECT_EQ(st.code(), StatusCode::kPeerLost);
  EXPECT_EQ(out, nullptr);
  EXPECT_FALSE(sets.isOpen(3));
  st = sets.get(
      3, [&](std::unique_ptr<DeviceBackend>*) { return Status::ok(); }, &out);  // no backend
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.toString();
  EXPECT_FALSE(sets.isOpen(3));
  ASSERT_TRUE(sets.get(
                      3,
                      [&](std::unique_ptr<DeviceBackend>* b) {
                        ++calls;
                        *b = std::make_unique<CountedBackend>(&live);
                        return Status::ok();
                      },
                      &out)
                  .isOk());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(live, 1);
}

TEST(DeviceBackendSetsTest, DestructionFreesEveryBackend) {
  int live = 0;
  {
    DeviceBackendSets sets;
    DeviceBackend* out = nullptr;
    for (int32_t id : {0, 4, 9}) {
      ASSERT_TRUE(sets.get(
                          id,
                          [&](std::unique_ptr<DeviceBackend>* b) {
                            *b = std::make_unique<CountedBackend>(&live);
                            return Status::ok();
                          },
                          &out)
                      .isOk());
    }
    EXPECT_EQ(live, 3);
  }
  EXPECT_EQ(live, 0);
}

// NCCL's place for a set: a ring over the set's members (its own subset
// transport), counting the collectives it ran and how many are alive.
class FakeSetBackend : public DeviceBackend {
 public:
  FakeSetBackend(Transport& world, const std::vector<int>& ranks, int* live)
      : transport_(world, ranks), inner_(transport_, 4096), live_(live) {
    ++*live_;
  }
  ~FakeSetBackend() override { --*live_; }
  const char* name() const override { return "fake-set"; }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  bool reduces(DataType dtype) const override { return dtype != DataType::kInt16; }
  Status allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    ++calls;
    return inner_.allreduce(buf, count, dtype, op);
  }
  Status allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    ++calls;
    return inner_.allgatherv(in, out, bytes);
  }
  Status broadcast(void* buf, size_t bytes, int root) override {
    ++calls;
    return inner_.broadcast(buf, bytes, root);
  }
  Status alltoallv(const void* in, const std::vector<size_t>& send, void* out,
                   const std::vector<size_t>& recv) override {
    ++calls;
    return inner_.alltoallv(in, send, out, recv);
  }
  Status reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    ++calls;
    return inner_.reducescatter(in, out, counts, dtype, op);
  }
  Status barrier() override { return inner_.barrier(); }

  int calls = 0;

 private:
  SubsetTransport transport_;
  TcpBackend inner_;
  int* live_;
};

constexpr int64_t kRows = 6;

// Global rank g's tensor: exact small integers in `dtype` (float32 or float64).
std::vector<uint8_t> inputOf(int g, DataType dtype) {
  std::vector<float> f(kRows);
  for (int64_t i = 0; i < kRows; ++i)
    f[i] = static_cast<float>((g + 1) * 100 + i * (g % 2 ? 3 : -2));
  std::vector<uint8_t> out(f.size() * dataTypeSize(dtype));
  fromFloat32(f.data(), f.size(), dtype, out.data());
  return out;
}

std::vector<double> asDoubles(const uint8_t* p, size_t n, DataType dtype) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DataType::kFloat64) {
      std::memcpy(&out[i], p + 8 * i, 8);
    } else {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      out[i] = f;
    }
  }
  return out;
}

// One single-tensor op of a set: its response and this rank's tensors.
struct SetOp {
  Response r;
  std::vector<uint8_t> input, output;
  TensorEntry entry;
  std::vector<Completion> done;

  SetOp(OpType type, ReduceOp op, DataType dtype, int32_t set, int n, int g, DeviceType device) {
    r.type = type;
    r.names = {"t"};
    r.dtype = dtype;
    r.reduce_op = op;
    r.device = device;
    r.process_set = set;
    r.root = 1;  // within the set
    if (type == OpType::kAllreduce) r.sizes = {kRows};
    if (type == OpType::kAllgather) {
      r.sizes.assign(static_cast<size_t>(n), kRows);
      r.sizes.push_back(1);
    }
    if (type == OpType::kReducescatter) r.sizes = {kRows, 1};
    input = inputOf(g, dtype);
    output.assign(input.size(), 0xEE);
    for (TensorView* v : {&entry.input, &entry.output}) {
      v->data = v == &entry.input ? input.data() : output.data();
      v->dtype = dtype;
      v->shape = {kRows};
      v->device = device;
      v->device_id = device == DeviceType::kCuda ? 0 : -1;
    }
  }
  Status run(Executor& executor) { return executor.execute(r, {&entry}, &done); }
  // What the op left for this rank: the output tensor, or the runtime-sized output.
  std::vector<double> result() const {
    if (done[0].has_output) {
      const auto& bytes = done[0].output.bytes;
      return asDoubles(bytes.data(), bytes.size() / dataTypeSize(r.dtype), r.dtype);
    }
    return asDoubles(output.data(), static_cast<size_t>(kRows), r.dtype);
  }
};

// Reference results over the members `ranks`, computed here from their inputs.
std::vector<double> expected(OpType type, const std::vector<int>& ranks, int set_rank) {
  const size_t n = ranks.size();
  std::vector<std::vector<double>> in;
  for (int g : ranks) {
    const std::vector<uint8_t> bytes = inputOf(g, DataType::kFloat32);
    in.push_back(asDoubles(bytes.data(), kRows, DataType::kFloat32));
  }
  std::vector<double> sum(kRows, 0.0);
  for (const auto& v : in) {
    for (int64_t i = 0; i < kRows; ++i) sum[i] += v[i];
  }
  switch (type) {
    case OpType::kAllreduce:
      return sum;
    case OpType::kBroadcast:
      return in[1];
    case OpType::kAllgather: {
      std::vector<double> all;
      for (const auto& v : in) all.insert(all.end(), v.begin(), v.end());
      return all;
    }
    default: {  // reducescatter: this member's rows of the sum
      int64_t begin = 0;
      for (int r = 0; r < set_rank; ++r) {
        begin += kRows / static_cast<int64_t>(n) + (r < kRows % static_cast<int64_t>(n) ? 1 : 0);
      }
      const int64_t rows =
          kRows / static_cast<int64_t>(n) + (set_rank < kRows % static_cast<int64_t>(n) ? 1 : 0);
      return std::vector<double>(sum.begin() + begin, sum.begin() + begin + rows);
    }
  }
}

// Adasum(a, b) of two vectors, directly from the formula, in float64.
std::vector<double> adasumOfTwo(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    out[i] = (1 - dot / (2 * na)) * a[i] + (1 - dot / (2 * nb)) * b[i];
  }
  return out;
}

struct SetSpec {
  int32_t id;
  std::vector<int> ranks;
};

// 4 ranks; sets {0, 2}, {1, 3} and the overlapping {1, 2}.
TEST(DeviceSetsTest, SetCollectivesOnCudaTensorsOpenTheSetsDeviceBackendLazily) {
  const std::vector<SetSpec> specs = {{1, {0, 2}}, {2, {1, 3}}, {3, {1, 2}}};
  MemoryWorld world(4);
  world.run([&](MemoryTransport& tr) {
    const int g = tr.rank();
    int live = 0;
    std::map<int32_t, int> opened;               // set id -> factory calls
    std::map<int32_t, FakeSetBackend*> backend;  // set id -> the open fake
    const SetSpec* current = nullptr;            // the set whose ops run now
    BackendBundle bundle;
    bundle.open_device = [](int, std::unique_ptr<DeviceContext>* out) {
      *out = std::make_unique<HostDeviceContext>();
      return Status::ok();
    };
    bundle.connect_device_set = [&](DeviceContext&, Backend& set_host,
                                    std::unique_ptr<DeviceBackend>* out) {
      // Called on members only, with the set's host backend.
      EXPECT_EQ(set_host.size(), static_cast<int>(current->ranks.size())) << "rank " << g;
      uint64_t token = set_host.rank() == 0 ? 1000u + static_cast<uint64_t>(current->id) : 0;
      TUTTI_RETURN_IF_ERROR(set_host.broadcast(&token, sizeof(token), 0));
      EXPECT_EQ(token, 1000u + static_cast<uint64_t>(current->id)) << "rank " << g;
      ++opened[current->id];
      auto b = std::make_unique<FakeSetBackend>(tr, current->ranks, &live);
      backend[current->id] = b.get();
      *out = std::move(b);
      return Status::ok();
    };
    DeviceExecutor device(bundle, g, 4);
    for (const SetSpec& spec : specs) {
      const auto it = std::find(spec.ranks.begin(), spec.ranks.end(), g);
      if (it == spec.ranks.end()) continue;
      current = &spec;
      const int n = static_cast<int>(spec.ranks.size());
      const int sr = static_cast<int>(it - spec.ranks.begin());
      SubsetTransport set_transport(tr, spec.ranks);
      TcpBackend host(set_transport, 4096);
      Executor on_device(host, sr, n);
      Executor on_host(host, sr, n);
      on_device.setDeviceExecutor(&device);
      const std::string what = "set " + std::to_string(spec.id) + " rank " + std::to_string(g);
      EXPECT_FALSE(device.hasDeviceBackend(spec.id)) << what;
      for (OpType type :
           {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast, OpType::kReducescatter}) {
        SetOp op(type, ReduceOp::kSum, DataType::kFloat32, spec.id, n, g, DeviceType::kCuda);
        ASSERT_TRUE(op.run(on_device).isOk()) << what << " " << opTypeName(type);
        EXPECT_EQ(op.result(), expected(type, spec.ranks, sr)) << what << " " << opTypeName(type);
        EXPECT_TRUE(device.hasDeviceBackend(spec.id)) << what;
      }
      EXPECT_EQ(opened[spec.id], 1) << what;          // once, at the first op
      EXPECT_EQ(backend[spec.id]->calls, 4) << what;  // every op ran on it

      // Adasum (float64) is staged through the set's host Adasum: the same
      // bits as on CPU tensors, and no collective on the device backend.
      SetOp cuda(OpType::kAllreduce, ReduceOp::kAdasum, DataType::kFloat64, spec.id, n, g,
                 DeviceType::kCuda);
      SetOp cpu(OpType::kAllreduce, ReduceOp::kAdasum, DataType::kFloat64, spec.id, n, g,
                DeviceType::kCpu);
      ASSERT_TRUE(cuda.run(on_device).isOk()) << what;
      ASSERT_TRUE(cpu.run(on_host).isOk()) << what;
      EXPECT_EQ(cuda.output, cpu.output) << what;
      EXPECT_EQ(backend[spec.id]->calls, 4) << what;
      const std::vector<uint8_t> a = inputOf(spec.ranks[0], DataType::kFloat64);
      const std::vector<uint8_t> b = inputOf(spec.ranks[1], DataType::kFloat64);
      const std::vector<double> want = adasumOfTwo(asDoubles(a.data(), kRows, DataType::kFloat64),
                                                   asDoubles(b.data(), kRows, DataType::kFloat64));
      const std::vector<double> got = cuda.result();
      for (int64_t i = 0; i < kRows; ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * std::fabs(want[i]));

      // Removal frees the communicator; a later op would open a new one.
      device.removeSet(spec.id);
      EXPECT_FALSE(device.hasDeviceBackend(spec.id)) << what;
      backend.erase(spec.id);
    }
    EXPECT_EQ(live, 0) << "rank " << g;
    // Ranks outside a set never opened it.
    for (const SetSpec& spec : specs) {
      const bool member = std::find(spec.ranks.begin(), spec.ranks.end(), g) != spec.ranks.end();
      EXPECT_EQ(opened.count(spec.id) != 0, member) << "set " << spec.id << " rank " << g;
    }
  });
}

// Adasum of CUDA tensors over the whole job (global set), staged, fused
// tensors and a lone one, float16/32/64: bit for bit the host Adasum; it
// never opens the job's device backend.
TEST(DeviceSetsTest, AdasumOnCudaTensorsEqualsTheHostAdasum) {
  MemoryWorld world(4);
  world.run([&](MemoryTransport& tr) {
    const int g = tr.rank();
    int opened = 0;
    BackendBundle bundle;
    bundle.open_device = [](int, std::unique_ptr<DeviceContext>* out) {
      *out = std::make_unique<HostDeviceContext>();
      return Status::ok();
    };
    bundle.connect_device_backend = [&](DeviceContext&, std::unique_ptr<DeviceBackend>*) {
      ++opened;
      return Status::internal("Adasum must not open the device backend");
    };
    DeviceExecutor device(bundle, g, 4);
    TcpBackend host(tr, 4096);
    Executor on_device(host, g, 4);
    Executor on_host(host, g, 4);
    on_device.setDeviceExecutor(&device);
    for (DataType dtype : {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64}) {
      for (size_t tensors : {size_t{1}, size_t{3}}) {
        const std::string what = std::string(dataTypeName(dtype)) + " x" + std::to_string(tensors) +
                                 " rank " + std::to_string(g);
        std::vector<std::vector<uint8_t>> outs;
        for (DeviceType where : {DeviceType::kCuda, DeviceType::kCpu}) {
          Response r;
          r.type = OpType::kAllreduce;
          r.reduce_op = ReduceOp::kAdasum;
          r.dtype = dtype;
          r.device = where;
          r.prescale = 0.5;
          r.postscale = 3.0;
          std::vector<std::vector<uint8_t>> in(tensors), out(tensors);
          std::vector<TensorEntry> entries(tensors);
          std::vector<const TensorEntry*> ptrs;
          for (size_t t = 0; t < tensors; ++t) {
            const int64_t count = 257 + 100 * static_cast<int64_t>(t);
            r.names.push_back("a" + std::to_string(t));
            r.sizes.push_back(count);
            std::vector<float> f(static_cast<size_t>(count));
            for (int64_t i = 0; i < count; ++i) {
              f[i] = std::sin(0.1f * static_cast<float>(i * (g + 1) + t)) + 0.25f * g;
            }
            in[t].resize(f.size() * dataTypeSize(dtype));
            fromFloat32(f.data(), f.size(), dtype, in[t].data());
            out[t].assign(in[t].size(), 0xEE);
            for (TensorView* v : {&entries[t].input, &entries[t].output}) {
              v->data = v == &entries[t].input ? in[t].data() : out[t].data();
              v->dtype = dtype;
              v->shape = {count};
              v->device = where;
              v->device_id = where == DeviceType::kCuda ? 0 : -1;
            }
            ptrs.push_back(&entries[t]);
          }
          std::vector<Completion> done;
          Executor& ex = where == DeviceType::kCuda ? on_device : on_host;
          ASSERT_TRUE(ex.execute(r, ptrs, &done).isOk()) << what;
          std::vector<uint8_t> all;
          for (const auto& o : out) all.insert(all.end(), o.begin(), o.end());
          outs.push_back(std::move(all));
        }
        EXPECT_EQ(outs[0], outs[1]) << what;
      }
    }
    EXPECT_EQ(opened, 0);
  });
}

}  // namespace
}  // namespace tutti

#include "tests/cuda/gpu_set_checks.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <vector>

namespace tutti {
namespace test {
namespace {

// Device memory holding `values`, freed on destruction.
class Buffer {
 public:
  template <typename T>
  explicit Buffer(const std::vector<T>& values) : bytes_(values.size() * sizeof(T)) {
    ok_ = cudaMalloc(&data_, bytes_ == 0 ? 1 : bytes_) == cudaSuccess &&
          cudaMemcpy(data_, values.data(), bytes_, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  ~Buffer() { cudaFree(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  bool ok() const { return ok_; }
  TensorView view(DataType dtype, Shape shape) const {
    TensorView v;
    v.data = data_;
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.device = DeviceType::kCuda;
    v.device_id = 0;
    return v;
  }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> out(bytes_ / sizeof(T));
    if (cudaMemcpy(out.data(), data_, bytes_, cudaMemcpyDeviceToHost) != cudaSuccess) out.clear();
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
  bool ok_ = false;
};

template <typename T>
std::vector<T> hostValues(const OwnedTensor* t) {
  std::vector<T> out;
  if (t == nullptr) return out;
  out.resize(t->bytes.size() / sizeof(T));
  std::memcpy(out.data(), t->bytes.data(), t->bytes.size());
  return out;
}

// "" when equal, else the first difference.
template <typename T>
std::string compare(const std::string& what, const std::vector<T>& got,
                    const std::vector<T>& want) {
  std::ostringstream os;
  if (got.size() != want.size()) {
    os << what << ": " << got.size() << " elements, expected " << want.size() << "; ";
    return os.str();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      os << what << ": element " << i << " is " << +got[i] << ", expected " << +want[i] << "; ";
      return os.str();
    }
  }
  return "";
}

// Enqueues with `start`, waits, and returns "" or the failed status.
template <typename Start>
std::string run(Runtime& rt, const std::string& what, Handle* h, Start&& start) {
  Status st = start();
  if (st.isOk()) st = rt.wait(*h);
  return st.isOk() ? "" : what + ": " + st.toString() + "; ";
}

std::string allreduces(Runtime& rt, const ProcessSetInfo& set, const OpOptions& base) {
  const int g = rt.rank(), n = set.size();
  std::string errors;
  // Fused float32 sum of two tensors.
  std::vector<float> a(1000), b(3);
  for (size_t j = 0; j < a.size(); ++j) a[j] = static_cast<float>((g + 1) * (j % 5 + 1));
  for (size_t j = 0; j < b.size(); ++j) b[j] = static_cast<float>(g * 10 + j);
  Buffer da(a), db(b);
  if (!da.ok() || !db.ok()) return "cudaMalloc/cudaMemcpy failed; ";
  std::vector<Handle> hs;
  OpOptions o = base;
  o.name = "set.fused";
  Status st = rt.groupedAllreduce(
      {da.view(DataType::kFloat32, {1000}), db.view(DataType::kFloat32, {3})},
      {da.view(DataType::kFloat32, {1000}), db.view(DataType::kFloat32, {3})}, o, &hs);
  for (Handle x : hs) {
    if (st.isOk()) st = rt.wait(x);
  }
  if (!st.isOk()) return "fused allreduce: " + st.toString() + "; ";
  std::vector<float> want_a(a.size(), 0.0f), want_b(b.size(), 0.0f);
  for (int m : set.ranks) {
    for (size_t j = 0; j < a.size(); ++j) want_a[j] += static_cast<float>((m + 1) * (j % 5 + 1));
    for (size_t j = 0; j < b.size(); ++j) want_b[j] += static_cast<float>(m * 10 + j);
  }
  errors += compare("fused allreduce (a)", da.download<float>(), want_a);
  errors += compare("fused allreduce (b)", db.download<float>(), want_b);
  // float64 average.
  std::vector<double> x(4097, static_cast<double>(g + 1));
  Buffer dx(x);
  o.name = "set.average";
  o.reduce_op = ReduceOp::kAverage;
  Handle h = 0;
  errors += run(rt, "average", &h, [&] {
    return rt.allreduce(dx.view(DataType::kFloat64, {4097}), dx.view(DataType::kFloat64, {4097}), o,
                        &h);
  });
  double sum = 0;
  for (int m : set.ranks) sum += m + 1;
  errors += compare("average", dx.download<double>(), std::vector<double>(x.size(), sum / n));
  return errors;
}

std::string gathers(Runtime& rt, const ProcessSetInfo& set, const OpOptions& base) {
  const int g = rt.rank(), n = set.size(), sr = set.rankOf(g);
  std::string errors;
  // Allgather: member i has i + 1 rows of 3, all its global rank.
  std::vector<int32_t> x(static_cast<size_t>(3 * (sr + 1)), g);
  Buffer dx(x);
  OpOptions o = base;
  o.name = "set.allgather";
  Handle h = 0;
  errors += run(rt, "allgather", &h, [&] {
    return rt.allgather(dx.view(DataType::kInt32, {sr + 1, 3}), o, &h);
  });
  std::vector<int32_t> want;
  for (int i = 0; i < n; ++i)
    want.insert(want.end(), static_cast<size_t>(3 * (i + 1)), set.ranks[i]);
  errors += compare("allgather", hostValues<int32_t>(rt.output(h)), want);
  (void)rt.release(h);
  // Reducescatter of 7 rows of 2: member i gets its rows of the sum.
  std::vector<float> y(14);
  for (size_t j = 0; j < y.size(); ++j) y[j] = static_cast<float>((g + 1) * (j / 2 + 1));
  Buffer dy(y);
  o.name = "set.reducescatter";
  errors += run(rt, "reducescatter", &h, [&] {
    return rt.reducescatter(dy.view(DataType::kFloat32, {7, 2}), o, &h);
  });
  int64_t begin = 0;
  for (int i = 0; i < sr; ++i) begin += 7 / n + (i < 7 % n ? 1 : 0);
  const int64_t rows = 7 / n + (sr < 7 % n ? 1 : 0);
  std::vector<float> want_rs;
  for (int64_t row = begin; row < begin + rows; ++row) {
    float s = 0;
    for (int m : set.ranks) s += static_cast<float>((m + 1) * (row + 1));
    want_rs.push_back(s);
    want_rs.push_back(s);
  }
  errors += compare("reducescatter", hostValues<float>(rt.output(h)), want_rs);
  (void)rt.release(h);
  return errors;
}

std::string broadcastFromLast(Runtime& rt, const ProcessSetInfo& set, const OpOptions& base) {
  const int g = rt.rank(), root = set.ranks.back();
  std::vector<float> x(1025);
  for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(g * 1000 + j);
  Buffer dx(x);
  OpOptions o = base;
  o.name = "set.broadcast";
  o.root = root;
  Handle h = 0;
  std::string errors = run(rt, "broadcast", &h, [&] {
    return rt.broadcast(dx.view(DataType::kFloat32, {1025}), dx.view(DataType::kFloat32, {1025}), o,
                        &h);
  });
  std::vector<float> want(x.size());
  for (size_t j = 0; j < want.size(); ++j) want[j] = static_cast<float>(root * 1000 + j);
  return errors + compare("broadcast", dx.download<float>(), want);
}

template <typename T>
std::string adasumOf(Runtime& rt, const ProcessSetInfo& set, DataType dtype) {
  const int g = rt.rank();
  std::vector<T> x(4099);
  for (size_t j = 0; j < x.size(); ++j) {
    x[j] = static_cast<T>(std::sin(0.01 * static_cast<double>(j) * (g + 1)) + 0.1 * g);
  }
  std::vector<T> on_cpu = x;
  Buffer dx(x);
  OpOptions o;
  o.process_set = set.id;
  o.reduce_op = ReduceOp::kAdasum;
  o.name = std::string("set.adasum.cuda.") + dataTypeName(dtype);
  Handle h = 0;
  const Shape shape = {static_cast<int64_t>(x.size())};
  std::string errors = run(rt, o.name, &h, [&] {
    return rt.allreduce(dx.view(dtype, shape), dx.view(dtype, shape), o, &h);
  });
  TensorView cpu{on_cpu.data(), dtype, shape};
  o.name = std::string("set.adasum.cpu.") + dataTypeName(dtype);
  errors += run(rt, o.name, &h, [&] { return rt.allreduce(cpu, cpu, o, &h); });
  return errors + compare(std::string("adasum ") + dataTypeName(dtype) + " (cuda vs cpu)",
                          dx.download<T>(), on_cpu);
}

}  // namespace

std::string checkSetCollectivesOnCuda(Runtime& rt, const ProcessSetInfo& set) {
  OpOptions base;
  base.process_set = set.id;
  return allreduces(rt, set, base) + gathers(rt, set, base) + broadcastFromLast(rt, set, base);
}

std::string checkAdasumOnCuda(Runtime& rt, const ProcessSetInfo& set) {
  return adasumOf<float>(rt, set, DataType::kFloat32) +
         adasumOf<double>(rt, set, DataType::kFloat64);
}

}  // namespace test
}  // namespace tutti

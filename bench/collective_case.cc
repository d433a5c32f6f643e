#include "bench/collective_case.h"

#include <cmath>
#include <cstring>

#include "ops/reduce.h"

namespace tutti::bench {
namespace {

double loadValue(const void* base, DataType dtype, int64_t i) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kBool:
      return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(base)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(base)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(base)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kUInt16:
      return static_cast<const uint16_t*>(base)[i];
    case DataType::kUInt32:
      return static_cast<const uint32_t*>(base)[i];
    case DataType::kUInt64:
      return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case DataType::kFloat16:
      return halfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16:
      return bfloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(base)[i];
  }
  return NAN;
}

void storeValue(void* base, DataType dtype, int64_t i, double v) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kBool:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(std::lround(v));
      return;
    case DataType::kInt8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(std::lround(v));
      return;
    case DataType::kInt16:
      static_cast<int16_t*>(base)[i] = static_cast<int16_t>(std::lround(v));
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(std::lround(v));
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[i] = std::llround(v);
      return;
    case DataType::kUInt16:
      static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(std::lround(v));
      return;
    case DataType::kUInt32:
      static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(std::llround(v));
      return;
    case DataType::kUInt64:
      static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(std::llround(v));
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(base)[i] = floatToHalf(static_cast<float>(v));
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = floatToBfloat16(static_cast<float>(v));
      return;
    case DataType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DataType::kFloat64:
      static_cast<double*>(base)[i] = v;
      return;
  }
}

// What rank r contributes at global index g to a reduction: small integers,
// so sums, minima, maxima and products are exact in every dtype.
double reduceInput(ReduceOp op, int r, int64_t g) {
  if (op == ReduceOp::kProduct) return (g + r) % 3 == 0 ? 2 : 1;
  return static_cast<double>(g % 7 + r + 1);
}

double reduced(ReduceOp op, int ranks, int64_t g) {
  const double n = ranks;
  switch (op) {
    case ReduceOp::kSum:
      return n * static_cast<double>(g % 7 + 1) + n * (n - 1) / 2;
    case ReduceOp::kAverage:
      return static_cast<double>(g % 7 + 1) + (n - 1) / 2;
    case ReduceOp::kMin:
      return static_cast<double>(g % 7 + 1);
    case ReduceOp::kMax:
      return static_cast<double>(g % 7) + n;
    case ReduceOp::kProduct: {
      double p = 1;
      for (int r = 0; r < ranks; ++r) p *= reduceInput(op, r, g);
      return p;
    }
    case ReduceOp::kAdasum:  // not parsed (parseReduceOp)
      break;
  }
  return NAN;
}

// Rank r's element at index i of the block it sends to rank p (alltoall).
double alltoallInput(int r, int p, int64_t i) {
  return static_cast<double>((r * 5 + p * 3 + i) % 11 + 1);
}

}  // namespace

const char* collectiveName(Collective op) {
  switch (op) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReducescatter:
      return "reducescatter";
    case Collective::kAlltoall:
      return "alltoall";
  }
  return "?";
}

const std::vector<Collective>& allCollectives() {
  static const std::vector<Collective> kAll = {Collective::kAllreduce, Collective::kAllgather,
                                               Collective::kBroadcast, Collective::kReducescatter,
                                               Collective::kAlltoall};
  return kAll;
}

bool parseCollective(const std::string& name, Collective* op) {
  for (Collective c : allCollectives()) {
    if (name == collectiveName(c)) {
      *op = c;
      return true;
    }
  }
  return false;
}

bool parseReduceOp(const std::string& name, ReduceOp* op) {
  // nccl-tests' short names too.
  if (name == "avg" || name == "prod") {
    *op = name == "avg" ? ReduceOp::kAverage : ReduceOp::kProduct;
    return true;
  }
  for (int i = 0; i < kNumReduceOps; ++i) {
    // Adasum is not element-wise: the check below has no closed form for it.
    if (static_cast<ReduceOp>(i) == ReduceOp::kAdasum) continue;
    if (name == reduceOpName(static_cast<ReduceOp>(i))) {
      *op = static_cast<ReduceOp>(i);
      return true;
    }
  }
  return false;
}

CollectiveCase::CollectiveCase(Runtime& runtime, Collective op, DataType dtype, ReduceOp reduce_op,
                               int64_t bytes, const ProcessSetInfo* set, int root, bool ordered)
    : runtime_(runtime),
      op_(op),
      dtype_(dtype),
      reduce_op_(reduce_op),
      rank_(set ? set->rankOf(runtime.rank()) : runtime.rank()),
      ranks_(set ? set->size() : runtime.size()),
      set_id_(set ? set->id : kGlobalProcessSet),
      root_member_(root),
      root_(set ? set->ranks[static_cast<size_t>(root)] : root),
      ordered_(ordered) {
  per_rank_ = std::max<int64_t>(1, bytes / elementSize() / numRanksInSize());
  const int64_t n = ranks_;
  switch (op_) {
    case Collective::kAllreduce:
    case Collective::kBroadcast:
      input_.resize(per_rank_ * elementSize());
      output_.resize(input_.size());
      for (int64_t i = 0; i < per_rank_; ++i) {
        // Broadcast: non-roots hold other values, so an op that does nothing fails the check.
        const double v = op_ == Collective::kAllreduce ? reduceInput(reduce_op_, rank_, i)
                                                       : static_cast<double>(i % 7 + rank_ + 1);
        storeValue(input_.data(), dtype_, i, v);
      }
      break;
    case Collective::kAllgather:
      input_.resize(per_rank_ * elementSize());
      for (int64_t i = 0; i < per_rank_; ++i) {
        storeValue(input_.data(), dtype_, i, static_cast<double>(i % 7 + rank_ + 1));
      }
      break;
    case Collective::kReducescatter:
      input_.resize(n * per_rank_ * elementSize());
      for (int64_t g = 0; g < n * per_rank_; ++g) {
        storeValue(input_.data(), dtype_, g, reduceInput(reduce_op_, rank_, g));
      }
      break;
    case Collective::kAlltoall:
      input_.resize(n * per_rank_ * elementSize());
      for (int p = 0; p < ranks_; ++p) {
        for (int64_t i = 0; i < per_rank_; ++i) {
          storeValue(input_.data(), dtype_, p * per_rank_ + i, alltoallInput(rank_, p, i));
        }
      }
      break;
  }
}

int64_t CollectiveCase::numRanksInSize() const {
  return op_ == Collective::kAllreduce || op_ == Collective::kBroadcast ? 1 : ranks_;
}

int64_t CollectiveCase::elementSize() const {
  return static_cast<int64_t>(dataTypeSize(dtype_));
}

const char* CollectiveCase::reduceOpLabel() const {
  return op_ == Collective::kAllreduce || op_ == Collective::kReducescatter
             ? reduceOpName(reduce_op_)
             : "none";
}

Status CollectiveCase::enqueue(const std::string& name, Handle* handle) {
  OpOptions options;
  options.name = name;
  options.reduce_op = reduce_op_;
  options.process_set = set_id_;
  options.root = root_;
  options.ordered = ordered_;
  TensorView in{input_.data(), dtype_, {static_cast<int64_t>(input_.size()) / elementSize()}};
  TensorView out{output_.data(), dtype_, in.shape};
  switch (op_) {
    case Collective::kAllreduce:
      return runtime_.allreduce(in, out, options, handle);
    case Collective::kBroadcast:
      return runtime_.broadcast(in, out, options, handle);
    case Collective::kAllgather:
      return runtime_.allgather(in, options, handle);
    case Collective::kReducescatter:
      return runtime_.reducescatter(in, options, handle);
    case Collective::kAlltoall:
      return runtime_.alltoall(in, options, handle);
  }
  return Status::internal("unknown collective");
}

double CollectiveCase::expected(int64_t index) const {
  switch (op_) {
    case Collective::kAllreduce:
      return reduced(reduce_op_, ranks_, index);
    case Collective::kBroadcast:
      return static_cast<double>(index % 7 + root_member_ + 1);  // the root's input
    case Collective::kAllgather:
      return static_cast<double>(index % per_rank_ % 7 + index / per_rank_ + 1);
    case Collective::kReducescatter:
      return reduced(reduce_op_, ranks_, rank_ * per_rank_ + index);
    case Collective::kAlltoall:
      return alltoallInput(static_cast<int>(index / per_rank_), rank_, index % per_rank_);
  }
  return NAN;
}

int64_t CollectiveCase::countWrong(const void* output, int64_t elements) const {
  // Exact, except for averages, whose division may round (integers to nearest).
  const bool reduces = op_ == Collective::kAllreduce || op_ == Collective::kReducescatter;
  double tolerance = 0;
  if (reduces && reduce_op_ == ReduceOp::kAverage) {
    tolerance = isFloatingPoint(dtype_) ? (elementSize() == 2 ? 1e-2 : 1e-5) : 1.0;
  }
  uint8_t rounded[8];
  int64_t wrong = 0;
  for (int64_t i = 0; i < elements; ++i) {
    const double want = expected(i);
    storeValue(rounded, dtype_, 0, want);
    const double exact = loadValue(rounded, dtype_, 0);
    const double got = loadValue(output, dtype_, i);
    const double limit = tolerance * (isFloatingPoint(dtype_) ? std::fabs(want) : 1.0);
    if (!(std::fabs(got - exact) <= limit)) ++wrong;
  }
  return wrong;
}

Status CollectiveCase::run(const std::string& name, int64_t* wrong) {
  if (wrong && !output_.empty()) std::memset(output_.data(), 0xFF, output_.size());
  Handle handle = 0;
  TUTTI_RETURN_IF_ERROR(enqueue(name, &handle));
  Status status = runtime_.wait(handle);
  if (status.isOk() && wrong) {
    const int64_t want = op_ == Collective::kAllgather || op_ == Collective::kAlltoall
                             ? ranks_ * per_rank_
                             : per_rank_;
    const void* out = output_.data();
    int64_t got = want;
    if (output_.empty()) {
      OwnedTensor* owned = runtime_.output(handle);
      out = owned ? owned->bytes.data() : nullptr;
      got = owned ? numElements(owned->shape) : 0;
    }
    const int64_t common = std::min(want, got);
    *wrong = std::llabs(want - got) + (common > 0 ? countWrong(out, common) : 0);
  }
  const Status released = runtime_.release(handle);
  return status.isOk() ? released : status;
}

Status maxOverRanks(Runtime& runtime, const std::string& name, std::vector<double>* values,
                    int32_t process_set) {
  TensorView view{values->data(), DataType::kFloat64, {static_cast<int64_t>(values->size())}};
  OpOptions options;
  options.name = name;
  options.process_set = process_set;
  options.reduce_op = ReduceOp::kMax;
  Handle handle = 0;
  TUTTI_RETURN_IF_ERROR(runtime.allreduce(view, view, options, &handle));
  const Status status = runtime.wait(handle);
  runtime.release(handle);
  return status;
}

Status sumOverRanks(Runtime& runtime, const std::string& name, int64_t* value,
                    int32_t process_set) {
  double v = static_cast<double>(*value);
  TensorView view{&v, DataType::kFloat64, {1}};
  OpOptions options;
  options.name = name;
  options.process_set = process_set;
  Handle handle = 0;
  TUTTI_RETURN_IF_ERROR(runtime.allreduce(view, view, options, &handle));
  const Status status = runtime.wait(handle);
  runtime.release(handle);
  *value = static_cast<int64_t>(v);
  return status;
}

}  // namespace tutti::bench

#include "coordinator/request_validation.h"

#include <cmath>
#include <functional>
#include <sstream>

#include "ops/algorithms/allreduce_adasum.h"

namespace tutti {

namespace {

std::string prefix(const Request& r) {
  return std::string(opTypeName(r.type)) + " '" + r.name + "': ";
}

std::string describeTensor(const TensorView& t) {
  return shapeToString(t.shape) + " " + dataTypeName(t.dtype);
}

bool isReduction(OpType type) {
  return type == OpType::kAllreduce || type == OpType::kReducescatter;
}

Status checkView(const Request& r, const TensorView& t, const char* what) {
  Status st = checkTensorView(t, what);
  if (st.isOk()) return st;
  return Status(st.code(), prefix(r) + st.message());
}

// Adasum's limits, as Horovod's: allreduce only, float16/32/64, a
// power-of-two number of ranks. CUDA tensors are staged through the host
// (coordinator/device_executor.h).
Status checkAdasum(const Request& r, const TensorView& t, int size) {
  if (r.type != OpType::kAllreduce) {
    return Status::invalidArgument(prefix(r) +
                                   "Adasum reduces allreduce and grouped allreduce only; "
                                   "reducescatter accepts sum, average, min, max and product");
  }
  Status st = checkAdasumType(t.dtype);
  if (st.isOk()) st = checkAdasumSize(size);
  return st.isOk() ? st : Status::invalidArgument(prefix(r) + st.message());
}

}  // namespace

int64_t reducescatterRows(int64_t first_dim, int rank, int size) {
  return first_dim / size + (rank < first_dim % size ? 1 : 0);
}

namespace {

// The reduce op and scale factors of an allreduce or reducescatter.
Status checkReduction(const Request& r, const TensorView& input, int size) {
  if (!isValidReduceOp(static_cast<int>(r.reduce_op))) {
    return Status::invalidArgument(prefix(r) + "unknown reduce op " +
                                   std::to_string(static_cast<int>(r.reduce_op)));
  }
  if (input.dtype == DataType::kBool && r.reduce_op == ReduceOp::kAverage) {
    return Status::invalidArgument(prefix(r) +
                                   "average is not defined for bool; use sum, min, max or "
                                   "product (logical or/and)");
  }
  if (!std::isfinite(r.prescale) || !std::isfinite(r.postscale)) {
    return Status::invalidArgument(prefix(r) + "prescale and postscale must be finite numbers");
  }
  if (r.reduce_op == ReduceOp::kAdasum) TUTTI_RETURN_IF_ERROR(checkAdasum(r, input, size));
  return Status::ok();
}

// Alltoall's rows and splits.
Status checkAlltoall(const Request& r, const TensorView& input, int size) {
  if (input.shape.empty()) {
    return Status::invalidArgument(prefix(r) +
                                   "a 0-dimensional input has no rows to send; reshape it");
  }
  int64_t d0 = input.shape[0];
  if (r.splits.empty()) {
    if (d0 % size != 0) {
      return Status::invalidArgument(prefix(r) + "first dimension " + std::to_string(d0) +
                                     " is not divisible by size " + std::to_string(size) +
                                     "; pass splits (rows sent to each rank)");
    }
    return Status::ok();
  }
  if (static_cast<int>(r.splits.size()) != size) {
    return Status::invalidArgument(prefix(r) + "splits has " + std::to_string(r.splits.size()) +
                                   " entries; expected one per rank (" + std::to_string(size) +
                                   ")");
  }
  int64_t sum = 0;
  for (size_t p = 0; p < r.splits.size(); ++p) {
    if (r.splits[p] < 0) {
      return Status::invalidArgument(prefix(r) + "splits[" + std::to_string(p) +
                                     "] = " + std::to_string(r.splits[p]) +
                                     " is negative; splits are rows sent to each rank, >= 0");
    }
    sum += r.splits[p];
  }
  if (sum > d0) {
    return Status::invalidArgument(prefix(r) + "splits sum to " + std::to_string(sum) +
                                   " rows, more than the first dimension " + std::to_string(d0));
  }
  return Status::ok();
}

// What each collective needs of the input's shape, and broadcast's root.
Status checkShapeAndRoot(const Request& r, const TensorView& input, int size) {
  switch (r.type) {
    case OpType::kAllgather:
    case OpType::kReducescatter:
      if (input.shape.empty()) {
        return Status::invalidArgument(
            prefix(r) + "a 0-dimensional input has no first dimension to " +
            (r.type == OpType::kAllgather ? "concatenate" : "scatter") + "; reshape it to [1]");
      }
      break;
    case OpType::kBroadcast:
      if (r.root < 0 || r.root >= size) {
        return Status::invalidArgument(prefix(r) + "root " + std::to_string(r.root) +
                                       " is out of range [0, " + std::to_string(size - 1) + "]");
      }
      break;
    case OpType::kAlltoall:
      return checkAlltoall(r, input, size);
    default:
      break;
  }
  return Status::ok();
}

}  // namespace

Status validateLocalRequest(const Request& r, const TensorView& input, const TensorView* output,
                            int size) {
  if (r.type == OpType::kBarrier || r.type == OpType::kJoin || r.type == OpType::kAddProcessSet ||
      r.type == OpType::kRemoveProcessSet) {
    return Status::ok();  // no tensor; process set arguments: coordinator/process_sets.h
  }
  TUTTI_RETURN_IF_ERROR(checkView(r, input, "input"));
  if (output != nullptr && r.type == OpType::kAllgather) {
    // Into the caller's buffer: its size is checked when the op runs
    // (coordinator/executor.h); the dtype here.
    TUTTI_RETURN_IF_ERROR(checkView(r, *output, "output"));
    if (output->dtype != input.dtype) {
      return Status::invalidArgument(prefix(r) + "output " + describeTensor(*output) +
                                     " must have the input's dtype " + describeTensor(input));
    }
  } else if (output != nullptr) {
    TUTTI_RETURN_IF_ERROR(checkView(r, *output, "output"));
    if (output->dtype != input.dtype || output->shape != input.shape) {
      return Status::invalidArgument(prefix(r) + "output " + describeTensor(*output) +
                                     " must have the input's dtype and shape " +
                                     describeTensor(input));
    }
  }
  if (isReduction(r.type)) TUTTI_RETURN_IF_ERROR(checkReduction(r, input, size));
  return checkShapeAndRoot(r, input, size);
}

Response errorResponse(std::vector<std::string> names, OpType type, StatusCode code,
                       std::string message) {
  Response resp;
  resp.kind = Response::Kind::kError;
  resp.type = type;
  resp.names = std::move(names);
  resp.error_code = code;
  resp.error_message = std::move(message);
  return resp;
}

namespace {

// Groups the submitting ranks by the rendering of one field. Empty when all
// agree; otherwise "rank 0 [17], rank 1 [18]" or "ranks [0, 2] int32; ...".
std::string differences(const std::vector<const Request*>& by_rank,
                        const std::function<std::string(const Request&)>& render,
                        const std::function<int(int)>& label) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r] == nullptr) continue;
    std::string v = render(*by_rank[r]);
    auto it = groups.begin();
    while (it != groups.end() && it->first != v) ++it;
    if (it == groups.end()) {
      groups.push_back({v, {label(static_cast<int>(r))}});
    } else {
      it->second.push_back(label(static_cast<int>(r)));
    }
  }
  if (groups.size() <= 1) return "";
  std::ostringstream out;
  bool singles = true;
  for (const auto& g : groups) singles = singles && g.second.size() == 1;
  constexpr size_t kMaxRanksShown = 16;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [value, ranks] = groups[i];
    out << (i ? (singles ? ", " : "; ") : "");
    if (ranks.size() == 1) {
      out << "rank " << ranks[0] << " " << value;
      continue;
    }
    out << "ranks [";
    for (size_t k = 0; k < ranks.size() && k < kMaxRanksShown; ++k)
      out << (k ? ", " : "") << ranks[k];
    if (ranks.size() > kMaxRanksShown) out << ", ... (" << ranks.size() << " ranks)";
    out << "] " << value;
  }
  return out.str();
}

std::string num(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string dimsAfterFirst(const Shape& s) {
  return shapeToString(Shape(s.begin() + (s.empty() ? 0 : 1), s.end()));
}

// One cross-rank rule: the field `what` (rendered per rank) must agree.
struct Rule {
  const char* what;
  bool applies;
  std::function<std::string(const Request&)> render;
};

// The rules a collective of `type` checks across ranks, in order; the first
// broken one is the error.
std::vector<Rule> crossRankRules(OpType type) {
  const bool reduction = isReduction(type);
  const bool shaped = type != OpType::kBarrier && type != OpType::kJoin;
  const bool same_shape = reduction || type == OpType::kBroadcast;
  const bool row_shape = type == OpType::kAllgather || type == OpType::kAlltoall;
  return {
      {"collectives", true, [](const Request& r) { return std::string(opTypeName(r.type)); }},
      {"devices", shaped,
       [](const Request& r) { return std::string(r.device == DeviceType::kCpu ? "cpu" : "cuda"); }},
      {"dtypes", shaped, [](const Request& r) { return std::string(dataTypeName(r.dtype)); }},
      {"reduce ops", reduction,
       [](const Request& r) { return std::string(reduceOpName(r.reduce_op)); }},
      {"prescale factors", reduction, [](const Request& r) { return num(r.prescale); }},
      {"postscale factors", reduction, [](const Request& r) { return num(r.postscale); }},
      {"roots", type == OpType::kBroadcast,
       [](const Request& r) { return std::to_string(r.root); }},
      {"shapes", same_shape, [](const Request& r) { return shapeToString(r.shape); }},
      {"numbers of dimensions", row_shape,
       [](const Request& r) { return std::to_string(r.shape.size()); }},
      {"dimensions after the first", row_shape,
       [](const Request& r) { return dimsAfterFirst(r.shape); }},
      {"compression specs", type == OpType::kAllreduce,
       [](const Request& r) {
         return r.compression.empty() ? std::string("none") : r.compression;
       }},
      {"groups", type == OpType::kAllreduce,
       [](const Request& r) {
         return "(id " + std::to_string(r.group_id) + ", size " + std::to_string(r.group_size) +
                ")";
       }},
      {"process set ranks", type == OpType::kAddProcessSet,
       [](const Request& r) { return shapeToString(r.splits); }},
      {"process set ids", type == OpType::kRemoveProcessSet,
       [](const Request& r) { return std::to_string(r.root); }},
  };
}

// The ranks' own argument errors, "rank R: what; rank S: what" ("" if none):
// one rank's bad arguments fail the name on every rank, before any
// cross-rank rule reads them.
std::string invalidArguments(const std::vector<const Request*>& by_rank,
                             const std::function<int(int)>& label) {
  std::string invalid;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r] == nullptr || by_rank[r]->error.empty()) continue;
    invalid += (invalid.empty() ? "" : "; ") +
               ("rank " + std::to_string(label(static_cast<int>(r)))) + ": " + by_rank[r]->error;
  }
  return invalid;
}

// Response.sizes of a collective, laid out per op as core/message.h says.
std::vector<int64_t> responseSizes(OpType type, const std::vector<const Request*>& by_rank,
                                   const Request& first) {
  const int size = static_cast<int>(by_rank.size());
  std::vector<int64_t> sizes;
  switch (type) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
      sizes = {numElements(first.shape)};
      break;
    case OpType::kReducescatter:
      sizes = {numElements(first.shape), rowElements(first.shape)};
      break;
    case OpType::kAllgather:
      for (const Request* r : by_rank) sizes.push_back(r->shape[0]);
      sizes.push_back(rowElements(first.shape));
      break;
    case OpType::kAddProcessSet:
      sizes = first.splits;
      break;
    case OpType::kAlltoall:
      for (const Request* r : by_rank) {
        for (int p = 0; p < size; ++p) {
          sizes.push_back(r->splits.empty() ? r->shape[0] / size : r->splits[p]);
        }
      }
      sizes.push_back(rowElements(first.shape));
      break;
    default:
      break;
  }
  return sizes;
}

// The Response every rank runs: the first submitter's parameters.
Response agreedResponse(const std::string& name, const std::vector<const Request*>& by_rank,
                        const Request* first, const std::vector<int64_t>& joined) {
  const OpType type = first->type;
  Response resp;
  resp.type = type;
  resp.names = {name};
  resp.dtype = first->dtype;
  resp.reduce_op = first->reduce_op;
  resp.prescale = first->prescale;
  resp.postscale = first->postscale;
  resp.root = first->root;
  resp.device = first->device;
  resp.compression = first->compression;
  resp.sizes = responseSizes(type, by_rank, *first);
  if (isReduction(type) || type == OpType::kBarrier) resp.joined_ranks = joined;
  return resp;
}

}  // namespace

Response buildResponse(const std::string& name, const std::vector<const Request*>& by_rank,
                       const std::vector<int>* global_ranks) {
  // Messages name global ranks; the Response's fields stay within the set.
  const std::function<int(int)> label = [global_ranks](int r) {
    return global_ranks == nullptr ? r : (*global_ranks)[static_cast<size_t>(r)];
  };
  const Request* first = nullptr;
  std::vector<int64_t> joined;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r] == nullptr) {
      joined.push_back(static_cast<int64_t>(r));
    } else if (first == nullptr) {
      first = by_rank[r];
    }
  }
  const OpType type = first->type;
  const std::string head = std::string(opTypeName(type)) + " '" + name + "'" +
                           (first->process_set == kGlobalProcessSet
                                ? std::string(": ")
                                : " in process set " + std::to_string(first->process_set) + ": ");
  const std::string invalid = invalidArguments(by_rank, label);
  if (!invalid.empty()) {
    return errorResponse({name}, type, StatusCode::kInvalidArgument, head + invalid);
  }
  for (const Rule& rule : crossRankRules(type)) {
    if (!rule.applies) continue;
    std::string diff = differences(by_rank, rule.render, label);
    if (!diff.empty()) {
      return errorResponse({name}, type, StatusCode::kMismatch,
                           head + rule.what + " differ across ranks: " + diff);
    }
  }
  if (!joined.empty() && !isReduction(type) && type != OpType::kBarrier) {
    // A cross-rank disagreement (some ranks joined, the others want data from
    // them), decided here for every rank: kMismatch, a failed collective
    // (Horovod's HorovodInternalError), not one rank's bad argument.
    std::ostringstream ranks;
    for (size_t i = 0; i < joined.size(); ++i)
      ranks << (i ? ", " : "") << label(static_cast<int>(joined[i]));
    return errorResponse({name}, type, StatusCode::kMismatch,
                         head + "ranks [" + ranks.str() +
                             "] have joined (join()); only allreduce, reducescatter and barrier "
                             "can run while ranks have joined");
  }
  return agreedResponse(name, by_rank, first, joined);
}

}  // namespace tutti

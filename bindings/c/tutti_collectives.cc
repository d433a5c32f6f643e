// The C ABI's collectives (tutti.h "Collectives", "Options and process
// sets"): argument checks, then the Runtime. The older entry points are the
// *_opts ones with default options.

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "bindings/c/c_api_state.h"
#include "bindings/c/tutti.h"
#include "coordinator/runtime.h"

using tutti_c::checkHandleOut;
using tutti_c::fail;
using tutti_c::failInvalid;
using tutti_c::report;
using tutti_c::toName;
using tutti_c::toOp;
using tutti_c::toView;
using tutti_c::withRuntime;

namespace {

// Applies the caller's options (NULL: defaults). `allreduce`: whether the
// compression field applies.
int applyOptions(const tutti_op_options* opts, bool allreduce, tutti::OpOptions* out) {
  if (opts == nullptr) return TUTTI_OK;
  if (opts->struct_size < sizeof(uint32_t) + sizeof(int32_t)) {
    return failInvalid("options->struct_size = " + std::to_string(opts->struct_size) +
                       ": initialise the options with tutti_op_options_init()");
  }
  out->process_set = opts->process_set_id;
  // A field counts when the caller's struct_size covers it (ABI: fields are
  // only ever appended).
  auto has = [opts](size_t offset, size_t size) { return opts->struct_size >= offset + size; };
  if (allreduce && has(offsetof(tutti_op_options, compression), sizeof(const char*)) &&
      opts->compression != nullptr && opts->compression[0] != '\0') {
    out->compression = opts->compression;
  }
  if (has(offsetof(tutti_op_options, ordered), sizeof(int32_t))) {
    if (opts->ordered != 0 && opts->ordered != 1) {
      return failInvalid("options->ordered = " + std::to_string(opts->ordered) +
                         ": accepted values are 0 (negotiated) and 1 (ordered)");
    }
    out->ordered = opts->ordered == 1;
  }
  return TUTTI_OK;
}

// Copies `values` into out[0..capacity) and their number into *count.
int copyOut(const std::vector<int>& values, int* out, int capacity, int* count) {
  if (count == nullptr) return failInvalid("count (out) is NULL");
  if (capacity < 0 || (capacity > 0 && out == nullptr)) {
    return failInvalid("capacity = " + std::to_string(capacity) +
                       " needs an array of that many entries (NULL only with 0)");
  }
  const size_t n = std::min(values.size(), static_cast<size_t>(capacity));
  std::copy(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n), out);
  *count = static_cast<int>(values.size());
  return TUTTI_OK;
}

// tutti_send_async / tutti_recv_async (tutti_p2p.h).
int pointToPoint(bool send, const tutti_tensor* tensor, int peer, int tag,
                 const tutti_op_options* opts, tutti_handle* handle) {
  tutti::TensorView view;
  tutti::OpOptions options;
  if (int rc = checkHandleOut(handle)) return rc;
  if (int rc = toView(tensor, send ? "input" : "output", &view)) return rc;
  if (int rc = applyOptions(opts, false, &options)) return rc;
  return withRuntime([&](tutti::Runtime& rt) {
    return report(send ? rt.send(view, peer, tag, options.process_set, handle)
                       : rt.recv(view, peer, tag, options.process_set, handle));
  });
}

}  // namespace

extern "C" {

int tutti_op_options_init(tutti_op_options* options) {
  if (options == nullptr) return failInvalid("options is NULL");
  *options = tutti_op_options{};
  options->struct_size = sizeof(tutti_op_options);
  options->process_set_id = 0;
  options->compression = nullptr;
  options->ordered = 0;
  return TUTTI_OK;
}

int tutti_allreduce_async(const tutti_tensor* input, const tutti_tensor* output, const char* name,
                          int op, double prescale, double postscale, tutti_handle* handle) {
  return tutti_allreduce_async_opts(input, output, name, op, prescale, postscale, nullptr, handle);
}

int tutti_allreduce_async_ex(const tutti_tensor* input, const tutti_tensor* output,
                             const char* name, int op, double prescale, double postscale,
                             const char* compression, tutti_handle* handle) {
  tutti_op_options opts;
  tutti_op_options_init(&opts);
  opts.compression = compression;
  return tutti_allreduce_async_opts(input, output, name, op, prescale, postscale, &opts, handle);
}

int tutti_allreduce_async_opts(const tutti_tensor* input, const tutti_tensor* output,
                               const char* name, int op, double prescale, double postscale,
                               const tutti_op_options* opts, tutti_handle* handle) {
  tutti::TensorView in, out;
  tutti::OpOptions options;
  if (int rc = checkHandleOut(handle)) return rc;
  if (int rc = toView(input, "input", &in)) return rc;
  if (int rc = toView(output, "output", &out)) return rc;
  if (int rc = toOp(op, &options.reduce_op)) return rc;
  if (int rc = applyOptions(opts, true, &options)) return rc;
  options.name = toName(name);
  options.prescale = prescale;
  options.postscale = postscale;
  return withRuntime(
      [&](tutti::Runtime& rt) { return report(rt.allreduce(in, out, options, handle)); });
}

int tutti_grouped_allreduce_async(int count, const tutti_tensor* inputs,
                                  const tutti_tensor* outputs, const char* name, int op,
                                  double prescale, double postscale, tutti_handle* handles) {
  return tutti_grouped_allreduce_async_opts(count, inputs, outputs, name, op, prescale, postscale,
                                            nullptr, handles);
}

int tutti_grouped_allreduce_async_ex(int count, const tutti_tensor* inputs,
                                     const tutti_tensor* outputs, const char* name, int op,
                                     double prescale, double postscale, const char* compression,
                                     tutti_handle* handles) {
  tutti_op_options opts;
  tutti_op_options_init(&opts);
  opts.compression = compression;
  return tutti_grouped_allreduce_async_opts(count, inputs, outputs, name, op, prescale, postscale,
                                            &opts, handles);
}

int tutti_grouped_allreduce_async_opts(int count, const tutti_tensor* inputs,
                                       const tutti_tensor* outputs, const char* name, int op,
                                       double prescale, double postscale,
                                       const tutti_op_options* opts, tutti_handle* handles) {
  if (count < 0) return failInvalid("count = " + std::to_string(count) + ": expected >= 0");
  if (count > 0 && (inputs == nullptr || outputs == nullptr || handles == nullptr)) {
    return failInvalid("inputs, outputs and handles must be arrays of count = " +
                       std::to_string(count) + " entries, got NULL");
  }
  std::vector<tutti::TensorView> in(count), out(count);
  for (int i = 0; i < count; ++i) {
    const std::string index = "[" + std::to_string(i) + "]";
    if (int rc = toView(&inputs[i], "inputs" + index, &in[i])) return rc;
    if (int rc = toView(&outputs[i], "outputs" + index, &out[i])) return rc;
  }
  tutti::OpOptions options;
  if (int rc = toOp(op, &options.reduce_op)) return rc;
  if (int rc = applyOptions(opts, true, &options)) return rc;
  options.name = toName(name);
  options.prescale = prescale;
  options.postscale = postscale;
  return withRuntime([&](tutti::Runtime& rt) {
    std::vector<tutti::Handle> result;
    tutti::Status status = rt.groupedAllreduce(in, out, options, &result);
    if (!status.isOk()) return fail(status);
    if (result.size() != static_cast<size_t>(count)) {
      return fail(tutti::Status::internal("groupedAllreduce returned " +
                                          std::to_string(result.size()) + " handles for " +
                                          std::to_string(count) + " tensors"));
    }
    std::copy(result.begin(), result.end(), handles);
    return static_cast<int>(TUTTI_OK);
  });
}

int tutti_allgather_async(const tutti_tensor* input, const char* name, tutti_handle* handle) {
  return tutti_allgather_async_opts(input, name, nullptr, handle);
}

int tutti_allgather_async_opts(const tutti_tensor* input, const char* name,
                               const tutti_op_options* opts, tutti_handle* handle) {
  tutti::TensorView in;
  tutti::OpOptions options;
  if (int rc = checkHandleOut(handle)) return rc;
  if (int rc = toView(input, "input", &in)) return rc;
  if (int rc = applyOptions(opts, false, &options)) return rc;
  options.name = toName(name);
  return withRuntime([&](tutti::Runtime& rt) { return report(rt.allgather(in, options, handle)); });
}

int tutti_allgather_into_async_opts(const tutti_tensor* input, const tutti_tensor* output,
                                    const char* name, const tutti_op_options* opts,
                                    tutti_handle* handle) {
  tutti::TensorView in;
  tutti::TensorView out;
  tutti::OpOptions options;
  if (int rc = checkHandleOut(handle)) return rc;
  if (int rc = toView(input, "input", &in)) return rc;
  if (int rc = toView(output, "output", &out)) return rc;
  if (int rc = applyOptions(opts, false, &options)) return rc;
  options.name = toName(name);
  return withRuntime(
      [&](tutti::Runtime& rt) { return report(rt.allgatherInto(in, out, options, handle)); });
}

int tutti_broadcast_async(const tutti_tensor* input, const tutti_tensor* output, int root,
                          const char* name, tutti_handle* handle) {
  return tutti_broadcast_async_opts(input, output, root, name, nullptr, handle);
}

int tutti_broadcast_async_opts(const tutti_tensor* input, const tutti_tensor* output, int root,
                               const char* name, const tutti_op_options* opts,
                               tutti_handle* handle) {
  tutti::TensorView in, out;
  tutti::OpOptions options;
  if (int rc = checkHandleOut(handle)) return rc;
  if (int rc = toView(input, "input", &in)) return rc;
  if (int rc = toView(output, "output", &out)) return rc;
  if (int rc = applyOptions(opts, false, &options)) return rc;
  options.name = toName(name);
  options.root = root;
  return withRuntime(
      [&](tutti::Runtime& rt) { return report(rt.broadcast(in, out, options, handle)); });
}

int tutti_alltoall_async(const tutti_tensor* input, const int64_t* splits, int nsplits,
                         const char* name, tutti_handle* handle) {
  return tutti_alltoall_async_opts(input, splits, nsplits, name, nullptr, handle);
}

int tutti_alltoall_async_opts(const tutti_tensor* input, const int64_t* splits, int nsplits,
                              const char* name, const tutti_op_options* opts,
                              tutti_handle* handle) {
  tutti::TensorView in;
  tutti::OpOptions options;
  if (int rc = checkHandleOut(handle)) return rc;
  if (int rc = toView(input, "input", &in)) return rc;
  if (nsplits < 0) return failInvalid("nsplits = " + std::to_string(nsplits) + ": expected >= 0");
  if (nsplits > 0 && splits == nullptr) {
    return failInvalid("splits is NULL but nsplits = " + std::to_string(nsplits));
  }
  if (int rc = applyOptions(opts, false, &options)) return rc;
  options.name = toName(name);
  if (nsplits > 0) options.splits.assign(splits, splits + nsplits);
  return withRuntime([&](tutti::Runtime& rt) { return report(rt.alltoall(in, options, handle)); });
}

int tutti_reducescatter_async(const tutti_tensor* input, const char* name, int op, double prescale,
                              double postscale, tutti_handle* handle) {
  return tutti_reducescatter_async_opts(input, name, op, prescale, postscale, nullptr, handle);
}

int tutti_reducescatter_async_opts(const tutti_tensor* input, const char* name, int op,
                                   double prescale, double postscale, const tutti_op_options* opts,
                                   tutti_handle* handle) {
  tutti::TensorView in;
  tutti::OpOptions options;
  if (int rc = checkHandleOut(handle)) return rc;
  if (int rc = toView(input, "input", &in)) return rc;
  if (int rc = toOp(op, &options.reduce_op)) return rc;
  if (int rc = applyOptions(opts, false, &options)) return rc;
  options.name = toName(name);
  options.prescale = prescale;
  options.postscale = postscale;
  return withRuntime(
      [&](tutti::Runtime& rt) { return report(rt.reducescatter(in, options, handle)); });
}

int tutti_barrier_async(tutti_handle* handle) {
  return tutti_barrier_async_opts(nullptr, handle);
}

int tutti_barrier_async_opts(const tutti_op_options* opts, tutti_handle* handle) {
  tutti::OpOptions options;
  if (int rc = checkHandleOut(handle)) return rc;
  if (int rc = applyOptions(opts, false, &options)) return rc;
  return withRuntime([&](tutti::Runtime& rt) {
    return report(rt.barrier(handle, options.process_set, options.ordered));
  });
}

int tutti_join_async(tutti_handle* handle) {
  if (int rc = checkHandleOut(handle)) return rc;
  return withRuntime([&](tutti::Runtime& rt) { return report(rt.join(handle)); });
}

int tutti_add_process_set(const int* ranks, int n, int* id) {
  if (id == nullptr) return failInvalid("id (out) is NULL");
  if (n < 0 || (n > 0 && ranks == nullptr)) {
    return failInvalid("ranks must be an array of n = " + std::to_string(n) +
                       " entries (n >= 0; NULL only with n = 0)");
  }
  std::vector<int> list(ranks, ranks + n);
  return withRuntime([&](tutti::Runtime& rt) {
    int32_t added = 0;
    tutti::Status st = rt.addProcessSet(list, &added);
    if (st.isOk()) *id = added;
    return report(st);
  });
}

int tutti_remove_process_set(int id) {
  return withRuntime([&](tutti::Runtime& rt) { return report(rt.removeProcessSet(id)); });
}

int tutti_process_set_info(int id, int* size, int* rank_in_set) {
  return withRuntime([&](tutti::Runtime& rt) {
    tutti::ProcessSetInfo set;
    tutti::Status st = rt.processSet(id, &set);
    if (!st.isOk()) return fail(st);
    if (size != nullptr) *size = set.size();
    if (rank_in_set != nullptr) *rank_in_set = set.rankOf(rt.rank());
    return static_cast<int>(TUTTI_OK);
  });
}

int tutti_process_set_ranks(int id, int* ranks, int capacity, int* count) {
  return withRuntime([&](tutti::Runtime& rt) {
    tutti::ProcessSetInfo set;
    tutti::Status st = rt.processSet(id, &set);
    if (!st.isOk()) return fail(st);
    return copyOut(set.ranks, ranks, capacity, count);
  });
}

int tutti_process_set_ids(int* ids, int capacity, int* count) {
  return withRuntime([&](tutti::Runtime& rt) {
    std::vector<int> all;
    for (const tutti::ProcessSetInfo& set : rt.processSets()) all.push_back(set.id);
    return copyOut(all, ids, capacity, count);
  });
}

int tutti_send_async(const tutti_tensor* input, int dst, int tag, const tutti_op_options* opts,
                     tutti_handle* handle) {
  return pointToPoint(true, input, dst, tag, opts, handle);
}

int tutti_recv_async(const tutti_tensor* output, int src, int tag, const tutti_op_options* opts,
                     tutti_handle* handle) {
  return pointToPoint(false, output, src, tag, opts, handle);
}

}  // extern "C"

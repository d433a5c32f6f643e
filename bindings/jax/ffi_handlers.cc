// XLA typed-FFI handlers of tutti's collectives, for tutti.jax.
//
// Each handler is a CPU custom call (registered by tutti.jax with
// jax.ffi.register_ffi_target(..., platform="cpu") from the exported symbols
// below) that runs one collective through tutti's C API and waits for it on
// XLA's thread. Every handler takes an XLA token as its first operand and
// returns one as its first result: tutti.jax threads them as an ordered
// effect, so that the collectives of a program, and of successive programs,
// run in program order on every rank. That is the ordered lane's contract
// (tutti_op_options.ordered, docs/ordered-lane.md), so every op asks for it;
// the runtime negotiates ops the lane cannot take (compressed allreduces, the
// mpi backend) under generated names, which program order makes equal on
// every rank as well.
//
// Buffers: operands and results are dense row-major host buffers of XLA's CPU
// client. complex64/complex128 travel as float32/float64 pairs (a trailing
// dimension of 2); tutti.jax admits them only for ops where that is the same
// (not min/max/product). Errors: an ffi::Error whose message starts with
// "[tutti status N: <name>]" (N a tutti_status), which tutti.jax turns into
// the matching tutti.TuttiError subclass.
//
// Thread-safety: the handlers may run on any thread, concurrently; tutti's C
// API is thread-safe.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tutti.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// An XLA buffer as tutti sees it: owns the shape that desc() points at.
struct Tensor {
  std::vector<int64_t> shape;
  void* data = nullptr;
  int32_t dtype = 0;

  tutti_tensor desc() const {
    return tutti_tensor{
        data, dtype, static_cast<int32_t>(shape.size()), shape.data(), TUTTI_DEVICE_CPU, -1};
  }
};

// tutti's dtype for an XLA element type; `pairs` is set for complex types,
// which travel as two real numbers. Returns false for types tutti lacks.
bool tuttiDtype(ffi::DataType type, int32_t* dtype, bool* pairs) {
  *pairs = false;
  switch (type) {
    case ffi::DataType::PRED:
      *dtype = TUTTI_BOOL;
      return true;
    case ffi::DataType::S8:
      *dtype = TUTTI_INT8;
      return true;
    case ffi::DataType::S16:
      *dtype = TUTTI_INT16;
      return true;
    case ffi::DataType::S32:
      *dtype = TUTTI_INT32;
      return true;
    case ffi::DataType::S64:
      *dtype = TUTTI_INT64;
      return true;
    case ffi::DataType::U8:
      *dtype = TUTTI_UINT8;
      return true;
    case ffi::DataType::U16:
      *dtype = TUTTI_UINT16;
      return true;
    case ffi::DataType::U32:
      *dtype = TUTTI_UINT32;
      return true;
    case ffi::DataType::U64:
      *dtype = TUTTI_UINT64;
      return true;
    case ffi::DataType::F16:
      *dtype = TUTTI_FLOAT16;
      return true;
    case ffi::DataType::BF16:
      *dtype = TUTTI_BFLOAT16;
      return true;
    case ffi::DataType::F32:
      *dtype = TUTTI_FLOAT32;
      return true;
    case ffi::DataType::F64:
      *dtype = TUTTI_FLOAT64;
      return true;
    case ffi::DataType::C64:
      *dtype = TUTTI_FLOAT32;
      *pairs = true;
      return true;
    case ffi::DataType::C128:
      *dtype = TUTTI_FLOAT64;
      *pairs = true;
      return true;
    default:
      return false;
  }
}

ffi::Error error(ffi::ErrorCode code, int status, const std::string& message) {
  return ffi::Error(code, "[tutti status " + std::to_string(status) + ": " +
                              tutti_status_name(status) + "] " + message);
}

ffi::Error invalid(const std::string& message) {
  return error(ffi::ErrorCode::kInvalidArgument, TUTTI_ERR_INVALID_ARGUMENT, message);
}

ffi::ErrorCode xlaCode(int status) {
  switch (status) {
    case TUTTI_ERR_INVALID_ARGUMENT:
      return ffi::ErrorCode::kInvalidArgument;
    case TUTTI_ERR_MISMATCH:
      return ffi::ErrorCode::kFailedPrecondition;
    case TUTTI_ERR_PEER_LOST:
      return ffi::ErrorCode::kUnavailable;
    case TUTTI_ERR_SHUTDOWN:
      return ffi::ErrorCode::kCancelled;
    case TUTTI_ERR_TIMEOUT:
      return ffi::ErrorCode::kDeadlineExceeded;
    case TUTTI_ERR_NOT_INITIALIZED:
      return ffi::ErrorCode::kFailedPrecondition;
    default:
      return ffi::ErrorCode::kInternal;
  }
}

// The error of a C API call that returned `rc` (its message is the last error).
ffi::Error callError(int rc, std::string_view op) {
  return error(xlaCode(rc), rc, std::string(op) + ": " + tutti_last_error());
}

Tensor describe(const ffi::AnyBuffer& buffer, void* data) {
  Tensor t;
  bool pairs = false;
  tuttiDtype(buffer.element_type(), &t.dtype, &pairs);
  auto dims = buffer.dimensions();
  t.shape.assign(dims.begin(), dims.end());
  if (pairs) t.shape.push_back(2);
  t.data = data;
  return t;
}

// Checks the element type, then describes the buffer.
ffi::ErrorOr<Tensor> tensorOf(const ffi::AnyBuffer& buffer, void* data) {
  int32_t dtype = 0;
  bool pairs = false;
  if (!tuttiDtype(buffer.element_type(), &dtype, &pairs)) {
    return ffi::Unexpected(invalid("element type " +
                                   std::to_string(static_cast<int>(buffer.element_type())) +
                                   " (XLA's numbering) is not supported by tutti"));
  }
  return describe(buffer, data);
}

tutti_op_options orderedOptions(int32_t process_set, std::string_view compression,
                                std::string* spec) {
  tutti_op_options options;
  tutti_op_options_init(&options);
  options.process_set_id = process_set;
  options.ordered = 1;
  if (!compression.empty()) {
    spec->assign(compression);
    options.compression = spec->c_str();
  }
  return options;
}

// Waits for `handle`; on failure the op's own status and message. Releases it
// unless `keep` (the caller reads its output, then releases it).
ffi::Error finish(tutti_handle handle, std::string_view op, bool keep = false) {
  int rc = tutti_wait(handle, -1.0);
  ffi::Error result = ffi::Error::Success();
  if (rc != TUTTI_OK) {
    int status = rc;
    size_t n = tutti_handle_message(handle, &status, nullptr, 0);
    std::string message(n, '\0');
    tutti_handle_message(handle, &status, message.data(), n + 1);
    result = error(xlaCode(rc), rc, std::string(op) + ": " + message);
  }
  if (!keep || rc != TUTTI_OK) tutti_release(handle);
  return result;
}

// Copies a completed op's runtime-sized output into `out` when its size is
// what tutti.jax computed at trace time, then releases the handle.
ffi::Error copyOutput(tutti_handle handle, const ffi::AnyBuffer& out, std::string_view op) {
  tutti_tensor got{};
  int rc = tutti_handle_output(handle, &got);
  size_t bytes = 0;
  if (rc == TUTTI_OK) {
    bytes = tutti_dtype_size(got.dtype);
    for (int i = 0; i < got.ndim; ++i) bytes *= static_cast<size_t>(got.shape[i]);
  }
  if (rc == TUTTI_OK && bytes == out.size_bytes()) {
    rc = tutti_handle_output_copy(handle, out.untyped_data(), bytes);
  }
  ffi::Error result = ffi::Error::Success();
  if (rc != TUTTI_OK) {
    result = callError(rc, op);
  } else if (bytes != out.size_bytes()) {
    result = error(ffi::ErrorCode::kFailedPrecondition, TUTTI_ERR_MISMATCH,
                   std::string(op) + ": the result has " + std::to_string(bytes) +
                       " bytes but the traced program expects " + std::to_string(out.size_bytes()) +
                       " (another rank's first dimension or splits changed since the program "
                       "was traced)");
  }
  tutti_release(handle);
  return result;
}

ffi::Error allreduceImpl(ffi::Token, ffi::RemainingArgs args, ffi::Result<ffi::Token>,
                         ffi::RemainingRets rets, int32_t op, double prescale, double postscale,
                         int32_t process_set, std::string_view compression) {
  const size_t count = args.size();
  if (count == 0 || rets.size() != count) return invalid("allreduce: operands and results differ");
  std::vector<Tensor> inputs, outputs;
  for (size_t i = 0; i < count; ++i) {
    auto in = args.get<ffi::AnyBuffer>(i);
    auto out = rets.get<ffi::AnyBuffer>(i);
    if (in.has_error()) return in.error();
    if (out.has_error()) return out.error();
    auto tin = tensorOf(*in, in->untyped_data());
    if (tin.has_error()) return tin.error();
    inputs.push_back(*tin);
    outputs.push_back(describe(**out, (*out)->untyped_data()));
  }
  std::vector<tutti_tensor> in_desc, out_desc;
  for (size_t i = 0; i < count; ++i) {
    in_desc.push_back(inputs[i].desc());
    out_desc.push_back(outputs[i].desc());
  }
  std::string spec;
  tutti_op_options options = orderedOptions(process_set, compression, &spec);
  std::vector<tutti_handle> handles(count);
  int rc = count == 1 ? tutti_allreduce_async_opts(&in_desc[0], &out_desc[0], nullptr, op, prescale,
                                                   postscale, &options, &handles[0])
                      : tutti_grouped_allreduce_async_opts(static_cast<int>(count), in_desc.data(),
                                                           out_desc.data(), nullptr, op, prescale,
                                                           postscale, &options, handles.data());
  if (rc != TUTTI_OK) return callError(rc, "allreduce");
  ffi::Error first = ffi::Error::Success();
  for (tutti_handle h : handles) {
    ffi::Error e = finish(h, "allreduce");
    if (first.success() && e.failure()) first = e;
  }
  return first;
}

ffi::Error allgatherImpl(ffi::Token, ffi::AnyBuffer input, ffi::Result<ffi::Token>,
                         ffi::Result<ffi::AnyBuffer> output, int32_t process_set) {
  auto in = tensorOf(input, input.untyped_data());
  if (in.has_error()) return in.error();
  Tensor out = describe(*output, output->untyped_data());
  tutti_tensor in_desc = in->desc(), out_desc = out.desc();
  tutti_op_options options = orderedOptions(process_set, {}, nullptr);
  tutti_handle handle = 0;
  int rc = tutti_allgather_into_async_opts(&in_desc, &out_desc, nullptr, &options, &handle);
  if (rc != TUTTI_OK) return callError(rc, "allgather");
  ffi::Error e = finish(handle, "allgather", /*keep=*/true);
  if (e.failure()) return e;
  tutti_tensor got{};
  if (tutti_handle_output(handle, &got) != TUTTI_OK) {  // written into `output`
    tutti_release(handle);
    return ffi::Error::Success();
  }
  return copyOutput(handle, *output, "allgather");  // a size error
}

ffi::Error broadcastImpl(ffi::Token, ffi::AnyBuffer input, ffi::Result<ffi::Token>,
                         ffi::Result<ffi::AnyBuffer> output, int32_t root, int32_t process_set) {
  auto in = tensorOf(input, input.untyped_data());
  if (in.has_error()) return in.error();
  Tensor out = describe(*output, output->untyped_data());
  tutti_tensor in_desc = in->desc(), out_desc = out.desc();
  tutti_op_options options = orderedOptions(process_set, {}, nullptr);
  tutti_handle handle = 0;
  int rc = tutti_broadcast_async_opts(&in_desc, &out_desc, root, nullptr, &options, &handle);
  if (rc != TUTTI_OK) return callError(rc, "broadcast");
  return finish(handle, "broadcast");
}

ffi::Error alltoallImpl(ffi::Token, ffi::AnyBuffer input, ffi::Result<ffi::Token>,
                        ffi::Result<ffi::AnyBuffer> output, ffi::Span<const int64_t> splits,
                        ffi::Span<const int64_t> received, int32_t process_set) {
  auto in = tensorOf(input, input.untyped_data());
  if (in.has_error()) return in.error();
  tutti_tensor in_desc = in->desc();
  tutti_op_options options = orderedOptions(process_set, {}, nullptr);
  tutti_handle handle = 0;
  std::vector<int64_t> send(splits.begin(), splits.end());
  int rc = tutti_alltoall_async_opts(&in_desc, send.data(), static_cast<int>(send.size()), nullptr,
                                     &options, &handle);
  if (rc != TUTTI_OK) return callError(rc, "alltoall");
  ffi::Error e = finish(handle, "alltoall", /*keep=*/true);
  if (e.failure()) return e;
  std::vector<int64_t> got(received.size() + 1);
  int count = 0;
  rc = tutti_handle_received_splits(handle, got.data(), static_cast<int>(got.size()), &count);
  if (rc == TUTTI_OK && (static_cast<size_t>(count) != received.size() ||
                         !std::equal(received.begin(), received.end(), got.begin()))) {
    tutti_release(handle);
    return error(ffi::ErrorCode::kFailedPrecondition, TUTTI_ERR_MISMATCH,
                 "alltoall: the rows received from each rank differ from those the program "
                 "was traced with (another rank's splits changed since)");
  }
  if (rc != TUTTI_OK) {
    tutti_release(handle);
    return callError(rc, "alltoall");
  }
  return copyOutput(handle, *output, "alltoall");
}

ffi::Error reducescatterImpl(ffi::Token, ffi::AnyBuffer input, ffi::Result<ffi::Token>,
                             ffi::Result<ffi::AnyBuffer> output, int32_t op, double prescale,
                             double postscale, int32_t process_set) {
  auto in = tensorOf(input, input.untyped_data());
  if (in.has_error()) return in.error();
  tutti_tensor in_desc = in->desc();
  tutti_op_options options = orderedOptions(process_set, {}, nullptr);
  tutti_handle handle = 0;
  int rc =
      tutti_reducescatter_async_opts(&in_desc, nullptr, op, prescale, postscale, &options, &handle);
  if (rc != TUTTI_OK) return callError(rc, "reducescatter");
  ffi::Error e = finish(handle, "reducescatter", /*keep=*/true);
  if (e.failure()) return e;
  return copyOutput(handle, *output, "reducescatter");
}

ffi::Error barrierImpl(ffi::Token, ffi::Result<ffi::Token>, int32_t process_set) {
  tutti_op_options options = orderedOptions(process_set, {}, nullptr);
  tutti_handle handle = 0;
  int rc = tutti_barrier_async_opts(&options, &handle);
  if (rc != TUTTI_OK) return callError(rc, "barrier");
  return finish(handle, "barrier");
}

}  // namespace

// The exported handlers (C symbols; tutti.jax wraps each with jax.ffi.pycapsule).
XLA_FFI_DEFINE_HANDLER_SYMBOL(TuttiJaxAllreduce, allreduceImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Token>()
                                  .RemainingArgs()
                                  .Ret<ffi::Token>()
                                  .RemainingRets()
                                  .Attr<int32_t>("op")
                                  .Attr<double>("prescale")
                                  .Attr<double>("postscale")
                                  .Attr<int32_t>("process_set")
                                  .Attr<std::string_view>("compression"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(TuttiJaxAllgather, allgatherImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Token>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int32_t>("process_set"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(TuttiJaxBroadcast, broadcastImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Token>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int32_t>("root")
                                  .Attr<int32_t>("process_set"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(TuttiJaxAlltoall, alltoallImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Token>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("splits")
                                  .Attr<ffi::Span<const int64_t>>("received")
                                  .Attr<int32_t>("process_set"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(TuttiJaxReducescatter, reducescatterImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Token>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int32_t>("op")
                                  .Attr<double>("prescale")
                                  .Attr<double>("postscale")
                                  .Attr<int32_t>("process_set"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    TuttiJaxBarrier, barrierImpl,
    ffi::Ffi::Bind().Arg<ffi::Token>().Ret<ffi::Token>().Attr<int32_t>("process_set"));

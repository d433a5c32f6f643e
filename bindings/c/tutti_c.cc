// The C ABI (tutti.h) over tutti::Runtime; the elastic functions are in
// tutti_elastic.cc.
//
// The one process global of tutti lives here (bindings/c/c_api_state.h): the
// Runtime that tutti_init() creates. A shared_mutex guards the pointer, not
// the Runtime (which is itself thread-safe): every call takes it shared, so
// waits on different threads and enqueues run concurrently; init and shutdown
// take it exclusively. Shutdown first completes every pending handle (under
// the shared lock) so that no waiter holds the lock while shutdown waits for it.

#include "tutti/config.h"  // TUTTI_VERSION_*: must agree with tutti.h (a redefinition warns)

// clang-format off
#include "bindings/c/tutti.h"
// clang-format on

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "bindings/c/c_api_state.h"
#include "coordinator/runtime.h"
#include "core/dtype.h"
#include "core/settings.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/backend_registry.h"

static_assert(TUTTI_UINT8 == static_cast<int>(tutti::DataType::kUInt8), "dtype ABI");
static_assert(TUTTI_INT8 == static_cast<int>(tutti::DataType::kInt8), "dtype ABI");
static_assert(TUTTI_INT16 == static_cast<int>(tutti::DataType::kInt16), "dtype ABI");
static_assert(TUTTI_INT32 == static_cast<int>(tutti::DataType::kInt32), "dtype ABI");
static_assert(TUTTI_INT64 == static_cast<int>(tutti::DataType::kInt64), "dtype ABI");
static_assert(TUTTI_FLOAT16 == static_cast<int>(tutti::DataType::kFloat16), "dtype ABI");
static_assert(TUTTI_BFLOAT16 == static_cast<int>(tutti::DataType::kBFloat16), "dtype ABI");
static_assert(TUTTI_FLOAT32 == static_cast<int>(tutti::DataType::kFloat32), "dtype ABI");
static_assert(TUTTI_FLOAT64 == static_cast<int>(tutti::DataType::kFloat64), "dtype ABI");
static_assert(TUTTI_BOOL == static_cast<int>(tutti::DataType::kBool), "dtype ABI");
static_assert(TUTTI_UINT16 == static_cast<int>(tutti::DataType::kUInt16), "dtype ABI");
static_assert(TUTTI_UINT32 == static_cast<int>(tutti::DataType::kUInt32), "dtype ABI");
static_assert(TUTTI_UINT64 == static_cast<int>(tutti::DataType::kUInt64), "dtype ABI");
static_assert(tutti::kNumDataTypes == 13, "a new dtype needs a TUTTI_* value in tutti.h");
static_assert(TUTTI_SUM == static_cast<int>(tutti::ReduceOp::kSum), "op ABI");
static_assert(TUTTI_AVERAGE == static_cast<int>(tutti::ReduceOp::kAverage), "op ABI");
static_assert(TUTTI_MIN == static_cast<int>(tutti::ReduceOp::kMin), "op ABI");
static_assert(TUTTI_MAX == static_cast<int>(tutti::ReduceOp::kMax), "op ABI");
static_assert(TUTTI_PRODUCT == static_cast<int>(tutti::ReduceOp::kProduct), "op ABI");
static_assert(TUTTI_ADASUM == static_cast<int>(tutti::ReduceOp::kAdasum), "op ABI");
static_assert(tutti::kNumReduceOps == 6, "a new op needs a TUTTI_* value in tutti.h");
static_assert(TUTTI_OK == static_cast<int>(tutti::StatusCode::kOk), "status ABI");
static_assert(TUTTI_ERR_INVALID_ARGUMENT == static_cast<int>(tutti::StatusCode::kInvalidArgument),
              "status ABI");
static_assert(TUTTI_ERR_MISMATCH == static_cast<int>(tutti::StatusCode::kMismatch), "status ABI");
static_assert(TUTTI_ERR_PEER_LOST == static_cast<int>(tutti::StatusCode::kPeerLost), "status ABI");
static_assert(TUTTI_ERR_SHUTDOWN == static_cast<int>(tutti::StatusCode::kShutdown), "status ABI");
static_assert(TUTTI_ERR_TIMEOUT == static_cast<int>(tutti::StatusCode::kTimeout), "status ABI");
static_assert(TUTTI_ERR_STALLED == static_cast<int>(tutti::StatusCode::kStalled), "status ABI");
static_assert(TUTTI_ERR_NOT_INITIALIZED == static_cast<int>(tutti::StatusCode::kNotInitialized),
              "status ABI");
static_assert(TUTTI_ERR_DUPLICATE_NAME == static_cast<int>(tutti::StatusCode::kDuplicateName),
              "status ABI");
static_assert(TUTTI_ERR_IO == static_cast<int>(tutti::StatusCode::kIoError), "status ABI");
static_assert(TUTTI_ERR_INTERNAL == static_cast<int>(tutti::StatusCode::kInternal), "status ABI");
static_assert(TUTTI_DEVICE_CPU == static_cast<int>(tutti::DeviceType::kCpu), "device ABI");
static_assert(TUTTI_DEVICE_CUDA == static_cast<int>(tutti::DeviceType::kCuda), "device ABI");
static_assert(sizeof(tutti::Handle) == sizeof(tutti_handle), "handle ABI");

namespace {
thread_local std::string t_last_error;
thread_local void* t_cuda_stream = nullptr;  // tutti_set_cuda_stream()
}  // namespace

namespace tutti_c {

Global& global() {
  static Global* g = new Global();  // never destroyed: safe to use from atexit handlers
  return *g;
}

int fail(const tutti::Status& status) {
  t_last_error = status.message();
  return static_cast<int>(status.code());
}

int report(const tutti::Status& status) {
  if (status.isOk()) return TUTTI_OK;
  return fail(status);
}

int failNotInitialized() {
  return fail(tutti::Status::notInitialized("tutti is not initialized: call tutti_init() first"));
}

}  // namespace tutti_c

namespace {

using tutti_c::fail;
using tutti_c::failInvalid;
using tutti_c::failNotInitialized;
using tutti_c::global;
using tutti_c::Global;
using tutti_c::report;
using tutti_c::withRuntime;

constexpr int kMaxDims = 64;

int placement(int (tutti::Runtime::*getter)() const) {
  Global& g = global();
  std::shared_lock<std::shared_mutex> lock(g.mutex);
  if (!g.runtime) {
    failNotInitialized();
    return -1;
  }
  return ((*g.runtime).*getter)();
}

// `handle`'s status without blocking: its op's status once it completed,
// kInvalidArgument for an unknown handle, `if_pending` while it runs. poll()
// first, because a completed op's own status may be kTimeout; a kTimeout from
// wait(0) after a false poll() means the op is still pending.
tutti::Status probeHandle(tutti::Runtime& runtime, tutti_handle handle,
                          const tutti::Status& if_pending) {
  if (runtime.poll(handle)) return runtime.wait(handle, 0);  // completed, or unknown
  tutti::Status probe = runtime.wait(handle, 0);
  return probe.code() == tutti::StatusCode::kTimeout ? if_pending : probe;
}

// The completed op's status, or kInvalidArgument when it is still pending.
tutti::Status completedStatus(tutti::Runtime& runtime, tutti_handle handle) {
  return probeHandle(runtime, handle,
                     tutti::Status::invalidArgument("handle " + std::to_string(handle) +
                                                    " is still pending: wait for it first"));
}

}  // namespace

namespace tutti_c {

// Checks a C tensor descriptor and turns it into a view. `what` names the
// argument in messages ("input", "outputs[3]").
int toView(const tutti_tensor* tensor, const std::string& what, tutti::TensorView* view) {
  if (tensor == nullptr) return failInvalid(what + " is NULL");
  if (tensor->ndim < 0 || tensor->ndim > kMaxDims) {
    return failInvalid(what + ".ndim = " + std::to_string(tensor->ndim) + ": expected 0.." +
                       std::to_string(kMaxDims));
  }
  if (tensor->ndim > 0 && tensor->shape == nullptr) {
    return failInvalid(what + ".shape is NULL but ndim = " + std::to_string(tensor->ndim));
  }
  tutti::Shape shape(tensor->shape, tensor->shape + tensor->ndim);
  tutti::Status fields =
      tutti::checkTensorFields(tensor->dtype, tensor->device, shape, tensor->data, what);
  if (!fields.isOk()) return fail(fields);
  view->data = tensor->data;
  view->dtype = static_cast<tutti::DataType>(tensor->dtype);
  view->shape = std::move(shape);
  view->device = static_cast<tutti::DeviceType>(tensor->device);
  view->device_id = tensor->device_id;
  view->stream = tensor->device == TUTTI_DEVICE_CUDA ? t_cuda_stream : nullptr;
  return TUTTI_OK;
}

int checkHandleOut(const void* handle) {
  if (handle == nullptr) return failInvalid("handle (out) is NULL");
  return TUTTI_OK;
}

int toOp(int op, tutti::ReduceOp* out) {
  if (!tutti::isValidReduceOp(op)) {
    return failInvalid("op = " + std::to_string(op) + ": expected a tutti_reduce_op in [0, 5]");
  }
  *out = static_cast<tutti::ReduceOp>(op);
  return TUTTI_OK;
}

std::string toName(const char* name) {
  return name == nullptr ? std::string() : std::string(name);
}

}  // namespace tutti_c

using tutti_c::checkHandleOut;

extern "C" {

const char* tutti_version(int* major, int* minor, int* patch) {
  if (major != nullptr) *major = TUTTI_VERSION_MAJOR;
  if (minor != nullptr) *minor = TUTTI_VERSION_MINOR;
  if (patch != nullptr) *patch = TUTTI_VERSION_PATCH;
  return TUTTI_VERSION_STRING;
}

int tutti_built_with(const char* feature) {
  if (feature == nullptr) return 0;
  const std::string f(feature);
  // What this build compiled in (tutti/config.h, from CMake).
  if (f == "mpi") return TUTTI_BUILT_MPI ? 1 : 0;
  if (f == "nccl") return TUTTI_BUILT_NCCL ? 1 : 0;
  if (f == "cuda") return TUTTI_BUILT_CUDA ? 1 : 0;
  return f == "tcp" ? 1 : 0;
}

int tutti_nccl_version(void) {
  return TUTTI_BUILT_NCCL ? TUTTI_NCCL_VERSION_CODE : 0;
}

const char* tutti_backend(void) {
  Global& g = global();
  std::shared_lock<std::shared_mutex> lock(g.mutex);
  if (!g.runtime) {
    failNotInitialized();
    return nullptr;
  }
  // Settings hold the resolved name ("auto" is never left there).
  for (const char* name : {"tcp", "mpi", "nccl"}) {
    if (g.runtime->settings().backend == name) return name;
  }
  return "tcp";
}

int tutti_mpi_threads_supported(void) {
  return tutti::mpiThreadsMultiple();
}

int tutti_set_cuda_stream(void* stream) {
  t_cuda_stream = stream;
  return TUTTI_OK;
}

const char* tutti_last_error(void) {
  return t_last_error.c_str();
}

const char* tutti_status_name(int status) {
  if (status < TUTTI_OK || status > TUTTI_ERR_INTERNAL) return "unknown";
  return tutti::statusCodeName(static_cast<tutti::StatusCode>(status));
}

size_t tutti_dtype_size(int dtype) {
  if (!tutti::isValidDataType(dtype)) return 0;
  return tutti::dataTypeSize(static_cast<tutti::DataType>(dtype));
}

int tutti_init(void) {
  Global& g = global();
  std::unique_lock<std::shared_mutex> lock(g.mutex);
  if (g.runtime) return TUTTI_OK;
  tutti::Settings settings;
  tutti::Status status = tutti::loadSettings(tutti::processEnv(), &settings);
  if (!status.isOk()) return fail(status);
  if (settings.elastic_worker_id >= 0) return report(tutti_c::elasticJoinLocked(g, settings));
  std::unique_ptr<tutti::Runtime> runtime;
  status = tutti::Runtime::create(settings, &runtime);
  if (!status.isOk()) return fail(status);
  g.runtime = std::move(runtime);
  return TUTTI_OK;
}

int tutti_shutdown(void) {
  Global& g = global();
  {
    // Completes pending handles so that waiters (who hold the shared lock)
    // return before we ask for the exclusive one.
    std::shared_lock<std::shared_mutex> lock(g.mutex);
    if (!g.runtime) return TUTTI_OK;
    g.runtime->shutdown();
  }
  std::unique_ptr<tutti::Runtime> dead;
  tutti::Status status;
  {
    std::unique_lock<std::shared_mutex> lock(g.mutex);
    if (!g.runtime) return TUTTI_OK;  // another thread shut down in between
    status = g.runtime->shutdown();
    dead = std::move(g.runtime);
  }
  dead.reset();  // joins the background thread outside the lock
  return report(status);
}

int tutti_is_initialized(void) {
  Global& g = global();
  std::shared_lock<std::shared_mutex> lock(g.mutex);
  return g.runtime ? 1 : 0;
}

int tutti_rank(void) {
  return placement(&tutti::Runtime::rank);
}
int tutti_size(void) {
  return placement(&tutti::Runtime::size);
}
int tutti_local_rank(void) {
  return placement(&tutti::Runtime::localRank);
}
int tutti_local_size(void) {
  return placement(&tutti::Runtime::localSize);
}
int tutti_cross_rank(void) {
  return placement(&tutti::Runtime::crossRank);
}
int tutti_cross_size(void) {
  return placement(&tutti::Runtime::crossSize);
}

int tutti_poll(tutti_handle handle) {
  const int rc = withRuntime([&](tutti::Runtime& rt) {
    // Runtime::poll() is true for an unknown handle too: ask first whether the
    // handle exists. (Released between the two calls: it had completed, 1.)
    if (!rt.hasHandle(handle)) {
      return -failInvalid("unknown handle " + std::to_string(handle) +
                          " (never returned by an enqueue, or already released)");
    }
    return rt.poll(handle) ? 1 : 0;
  });
  return rc == TUTTI_ERR_NOT_INITIALIZED ? -rc : rc;
}

int tutti_wait(tutti_handle handle, double timeout_seconds) {
  return withRuntime([&](tutti::Runtime& rt) { return report(rt.wait(handle, timeout_seconds)); });
}

size_t tutti_handle_message(tutti_handle handle, int* status, char* buf, size_t buf_size) {
  tutti::Status st;
  {
    Global& g = global();
    std::shared_lock<std::shared_mutex> lock(g.mutex);
    if (!g.runtime) {
      st = tutti::Status::notInitialized("tutti is not initialized: call tutti_init() first");
    } else {
      st = probeHandle(
          *g.runtime, handle,
          tutti::Status::timeout("handle " + std::to_string(handle) + " is still pending"));
    }
  }
  if (status != nullptr) *status = static_cast<int>(st.code());
  const std::string& message = st.message();
  if (buf != nullptr && buf_size > 0) {
    const size_t n = std::min(message.size(), buf_size - 1);
    std::memcpy(buf, message.data(), n);
    buf[n] = '\0';
  }
  return message.size();
}

int tutti_handle_output(tutti_handle handle, tutti_tensor* out) {
  if (out == nullptr) return failInvalid("out is NULL");
  return withRuntime([&](tutti::Runtime& rt) {
    tutti::Status status = completedStatus(rt, handle);
    if (!status.isOk()) return fail(status);
    tutti::OwnedTensor* tensor = rt.output(handle);
    if (tensor == nullptr) {
      return failInvalid("handle " + std::to_string(handle) +
                         " has no runtime-sized output (only allgather, alltoall and "
                         "reducescatter have one)");
    }
    out->data = tensor->bytes.data();
    out->dtype = static_cast<int32_t>(tensor->dtype);
    out->ndim = static_cast<int32_t>(tensor->shape.size());
    out->shape = tensor->shape.data();
    out->device = TUTTI_DEVICE_CPU;
    out->device_id = -1;
    return static_cast<int>(TUTTI_OK);
  });
}

int tutti_handle_output_copy(tutti_handle handle, void* dst, size_t dst_bytes) {
  return withRuntime([&](tutti::Runtime& rt) {
    tutti::Status status = completedStatus(rt, handle);
    if (!status.isOk()) return fail(status);
    tutti::OwnedTensor* tensor = rt.output(handle);
    if (tensor == nullptr) {
      return failInvalid("handle " + std::to_string(handle) + " has no runtime-sized output");
    }
    const size_t bytes = tensor->bytes.size();
    if (dst_bytes < bytes) {
      return failInvalid("dst_bytes = " + std::to_string(dst_bytes) + " but the output has " +
                         std::to_string(bytes) + " bytes");
    }
    if (bytes > 0) {
      if (dst == nullptr) return failInvalid("dst is NULL");
      std::memcpy(dst, tensor->bytes.data(), bytes);
    }
    return static_cast<int>(TUTTI_OK);
  });
}

int tutti_handle_received_splits(tutti_handle handle, int64_t* splits, int capacity, int* count) {
  if (capacity < 0 || (capacity > 0 && splits == nullptr)) {
    return failInvalid("splits must hold capacity = " + std::to_string(capacity) + " entries");
  }
  return withRuntime([&](tutti::Runtime& rt) {
    tutti::Status status = completedStatus(rt, handle);
    if (!status.isOk()) return fail(status);
    std::vector<int64_t> received = rt.receivedSplits(handle);
    const size_t n = std::min(received.size(), static_cast<size_t>(capacity));
    std::copy(received.begin(), received.begin() + n, splits);
    if (count != nullptr) *count = static_cast<int>(received.size());
    return static_cast<int>(TUTTI_OK);
  });
}

int tutti_handle_join_result(tutti_handle handle, int* last_rank) {
  if (last_rank == nullptr) return failInvalid("last_rank is NULL");
  return withRuntime([&](tutti::Runtime& rt) {
    tutti::Status status = completedStatus(rt, handle);
    if (!status.isOk()) return fail(status);
    *last_rank = rt.joinResult(handle);
    return static_cast<int>(TUTTI_OK);
  });
}

int tutti_handle_on_complete(tutti_handle handle, tutti_completion_fn fn, void* user_data) {
  if (fn == nullptr) return failInvalid("fn is NULL: pass the function to call on completion");
  return withRuntime([&](tutti::Runtime& rt) {
    return report(rt.onComplete(handle, [fn, user_data](tutti::Handle h, const tutti::Status& st) {
      fn(h, static_cast<int>(st.code()), user_data);
    }));
  });
}

void tutti_completion_write_fd(tutti_handle handle, int status, void* user_data) {
  const tutti_completion_record record{handle, status, 0};
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(user_data));
  ssize_t n;
  do {
    n = write(fd, &record, sizeof(record));
  } while (n < 0 && errno == EINTR);
}

int tutti_release(tutti_handle handle) {
  return withRuntime([&](tutti::Runtime& rt) { return report(rt.release(handle)); });
}

uint64_t tutti_bytes_sent(void) {
  uint64_t bytes = 0;
  withRuntime([&](tutti::Runtime& rt) {
    bytes = rt.bytesSent();
    return static_cast<int>(TUTTI_OK);
  });
  return bytes;
}

int tutti_start_timeline(const char* path, int mark_cycles) {
  if (path == nullptr || path[0] == '\0') return failInvalid("path is NULL or empty");
  return withRuntime(
      [&](tutti::Runtime& rt) { return report(rt.startTimeline(path, mark_cycles != 0)); });
}

int tutti_stop_timeline(void) {
  return withRuntime([&](tutti::Runtime& rt) { return report(rt.stopTimeline()); });
}

}  // extern "C"

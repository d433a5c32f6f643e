#include "ops/nccl/nccl_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_device.h"

namespace tutti {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUniqueIdKey = "nccl/unique_id";

// Sleeps between polls: 10 us, doubling up to 1 ms, so that short
// collectives finish with little latency and long ones cost little CPU.
class Backoff {
 public:
  void sleep() {
    std::this_thread::sleep_for(std::chrono::microseconds(us_));
    us_ = std::min(us_ * 2, 1000);
  }

 private:
  int us_ = 10;
};

Status ncclError(ncclResult_t result, const char* call, int rank) {
  std::string message = std::string("NCCL error in ") + call + " on rank " + std::to_string(rank) +
                        ": " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') message += std::string(" (") + last + ")";
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return Status::peerLost(message + "; a peer died or a connection broke");
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return Status::invalidArgument(std::move(message));
    default:
      return Status::internal(std::move(message));
  }
}

struct NcclType {
  ncclDataType_t type = ncclUint8;
  ncclRedOp_t op = ncclSum;
};

NcclType ncclTypeOf(DataType dtype, ReduceOp op) {
  NcclType t;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // the coordinator sums and scales
      t.op = ncclSum;
      break;
    case ReduceOp::kMin:
      t.op = ncclMin;
      break;
    case ReduceOp::kMax:
      t.op = ncclMax;
      break;
    case ReduceOp::kProduct:
      t.op = ncclProd;
      break;
    case ReduceOp::kAdasum:  // never here: CUDA Adasum is staged through the host backend
      break;
  }
  switch (dtype) {
    case DataType::kUInt8:
      t.type = ncclUint8;
      break;
    case DataType::kInt8:
      t.type = ncclInt8;
      break;
    case DataType::kInt16:  // reduces() is false: never reached
    case DataType::kUInt16:
      t.type = ncclUint8;
      break;
    case DataType::kUInt32:
      t.type = ncclUint32;
      break;
    case DataType::kUInt64:
      t.type = ncclUint64;
      break;
    case DataType::kInt32:
      t.type = ncclInt32;
      break;
    case DataType::kInt64:
      t.type = ncclInt64;
      break;
    case DataType::kFloat16:
      t.type = ncclFloat16;
      break;
    case DataType::kBFloat16:
      t.type = ncclBfloat16;
      break;
    case DataType::kFloat32:
      t.type = ncclFloat32;
      break;
    case DataType::kFloat64:
      t.type = ncclFloat64;
      break;
    case DataType::kBool:
      // 0 or 1 in a byte: or = max, and = min.
      t.type = ncclUint8;
      t.op = (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? ncclMin : ncclMax;
      break;
  }
  return t;
}

bool allEqual(const std::vector<size_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](size_t x) { return x == v[0]; });
}

std::vector<size_t> offsetsOf(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

}  // namespace

// Every collective below: bail out if broken, make the device current, queue
// on the stream through check(), then finish().
#define TUTTI_NCCL_ENTER()                            \
  if (!broken_.isOk()) return broken_;                \
  cuda::DeviceGuard _tutti_guard(device_.deviceId()); \
  if (!_tutti_guard.status().isOk()) return fail(_tutti_guard.status())

NcclBackend::NcclBackend(DeviceContext& device, int rank, int size, double timeout_seconds)
    : device_(device),
      rank_(rank),
      size_(size),
      timeout_seconds_(timeout_seconds),
      stream_(static_cast<cudaStream_t>(device.stream())) {}

Status NcclBackend::create(DeviceContext& device, Store* store, int rank, int size,
                           double timeout_seconds, std::unique_ptr<NcclBackend>* out) {
  if (size > 1 && store == nullptr) {
    return Status::internal("NcclBackend::create: a job of " + std::to_string(size) +
                            " ranks needs the rendezvous store");
  }
  std::unique_ptr<NcclBackend> backend(new NcclBackend(device, rank, size, timeout_seconds));
  TUTTI_RETURN_IF_ERROR(backend->init([&](ncclUniqueId* id) -> Status {
    if (size == 1) return Status::ok();
    if (rank == 0) {
      const auto* p = reinterpret_cast<const uint8_t*>(id);
      return store->set(kUniqueIdKey, std::vector<uint8_t>(p, p + sizeof(*id)));
    }
    std::vector<uint8_t> bytes;
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000.0));
    TUTTI_RETURN_IF_ERROR(store->get(kUniqueIdKey, timeout, &bytes));
    if (bytes.size() != sizeof(*id)) {
      return Status::internal("the rendezvous store holds an ncclUniqueId of " +
                              std::to_string(bytes.size()) + " bytes; expected " +
                              std::to_string(sizeof(*id)));
    }
    std::memcpy(id, bytes.data(), sizeof(*id));
    return Status::ok();
  }));
  *out = std::move(backend);
  return Status::ok();
}

Status NcclBackend::createOverHost(DeviceContext& device, Backend& host, double timeout_seconds,
                                   std::unique_ptr<NcclBackend>* out) {
  std::unique_ptr<NcclBackend> backend(
      new NcclBackend(device, host.rank(), host.size(), timeout_seconds));
  TUTTI_RETURN_IF_ERROR(backend->init([&](ncclUniqueId* id) -> Status {
    // Rank 0's id to every member, over the members' host collective.
    return host.size() > 1 ? host.broadcast(id, sizeof(*id), 0) : Status::ok();
  }));
  *out = std::move(backend);
  return Status::ok();
}

Status NcclBackend::init(const std::function<Status(ncclUniqueId*)>& exchange) {
  TUTTI_NCCL_ENTER();
  TUTTI_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  TUTTI_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&barrier_buf_), sizeof(float)));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank_ == 0) TUTTI_RETURN_IF_ERROR(check(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  TUTTI_RETURN_IF_ERROR(exchange(&id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return check(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
}

NcclBackend::~NcclBackend() {
  cuda::DeviceGuard guard(device_.deviceId());
  // Every collective was waited for; abort frees the communicator without a
  // handshake with peers that may be gone.
  if (comm_ != nullptr) ncclCommAbort(comm_);
  cudaFree(barrier_buf_);
  if (done_ != nullptr) cudaEventDestroy(done_);
}

Status NcclBackend::fail(Status status) {
  if (broken_.isOk()) {
    broken_ = std::move(status);
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }
  return broken_;
}

Status NcclBackend::check(ncclResult_t result, const char* call) {
  if (!broken_.isOk()) return broken_;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds_);
  Backoff backoff;
  while (result == ncclInProgress && comm_ != nullptr) {
    if (Clock::now() > deadline) {
      return fail(Status::peerLost(std::string("NCCL: ") + call + " on rank " +
                                   std::to_string(rank_) + " did not complete within " +
                                   std::to_string(timeout_seconds_) +
                                   " s (TUTTI_TIMEOUT_SECONDS): a peer did not join or died"));
    }
    backoff.sleep();
    if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) result = ncclInternalError;
  }
  if (result != ncclSuccess && result != ncclInProgress) {
    return fail(ncclError(result, call, rank_));
  }
  return Status::ok();
}

Status NcclBackend::finish(const char* call) {
  if (!broken_.isOk()) return broken_;
  cudaError_t e = cudaEventRecord(done_, stream_);
  if (e != cudaSuccess) return fail(cuda::cudaStatus(e, "cudaEventRecord", __FILE__, __LINE__));
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds_);
  Backoff backoff;
  for (;;) {
    e = cudaEventQuery(done_);
    if (e == cudaSuccess) return Status::ok();
    if (e != cudaErrorNotReady) {
      return fail(cuda::cudaStatus(e, "cudaEventQuery", __FILE__, __LINE__));
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
    if (r != ncclSuccess) async = r;
    if (async != ncclSuccess && async != ncclInProgress) {
      return fail(ncclError(async, call, rank_));
    }
    if (Clock::now() > deadline) {
      return fail(Status::peerLost(std::string("NCCL: ") + call + " on rank " +
                                   std::to_string(rank_) + " made no progress for " +
                                   std::to_string(timeout_seconds_) +
                                   " s (TUTTI_TIMEOUT_SECONDS): a peer died or hangs; the "
                                   "communicator was aborted"));
    }
    backoff.sleep();
  }
}

Status NcclBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  TUTTI_NCCL_ENTER();
  if (count == 0) return Status::ok();
  const NcclType t = ncclTypeOf(dtype, op);
  TUTTI_RETURN_IF_ERROR(
      check(ncclAllReduce(buf, buf, count, t.type, t.op, comm_, stream_), "ncclAllReduce"));
  return finish("ncclAllReduce");
}

Status NcclBackend::allgatherv(const void* input, void* output,
                               const std::vector<size_t>& bytes_per_rank) {
  TUTTI_NCCL_ENTER();
  char* out = static_cast<char*>(output);
  if (allEqual(bytes_per_rank)) {
    if (bytes_per_rank[0] == 0) return Status::ok();
    TUTTI_RETURN_IF_ERROR(
        check(ncclAllGather(input, output, bytes_per_rank[0], ncclUint8, comm_, stream_),
              "ncclAllGather"));
    return finish("ncclAllGather");
  }
  // Uneven blocks: every rank broadcasts its own, grouped into one launch.
  const std::vector<size_t> offsets = offsetsOf(bytes_per_rank);
  TUTTI_RETURN_IF_ERROR(check(ncclGroupStart(), "ncclGroupStart"));
  for (int root = 0; root < size_; ++root) {
    const size_t r = static_cast<size_t>(root);
    if (bytes_per_rank[r] == 0) continue;
    const void* send = root == rank_ ? input : out + offsets[r];
    TUTTI_RETURN_IF_ERROR(check(
        ncclBroadcast(send, out + offsets[r], bytes_per_rank[r], ncclUint8, root, comm_, stream_),
        "ncclBroadcast (allgatherv)"));
  }
  TUTTI_RETURN_IF_ERROR(check(ncclGroupEnd(), "ncclGroupEnd (allgatherv)"));
  return finish("allgatherv (grouped ncclBroadcast)");
}

Status NcclBackend::broadcast(void* buf, size_t bytes, int root) {
  TUTTI_NCCL_ENTER();
  if (bytes == 0) return Status::ok();
  TUTTI_RETURN_IF_ERROR(
      check(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast"));
  return finish("ncclBroadcast");
}

Status NcclBackend::alltoallv(const void* input, const std::vector<size_t>& send_bytes,
                              void* output, const std::vector<size_t>& recv_bytes) {
  TUTTI_NCCL_ENTER();
  const std::vector<size_t> send_offsets = offsetsOf(send_bytes);
  const std::vector<size_t> recv_offsets = offsetsOf(recv_bytes);
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  TUTTI_RETURN_IF_ERROR(check(ncclGroupStart(), "ncclGroupStart"));
  for (int peer = 0; peer < size_; ++peer) {
    const size_t p = static_cast<size_t>(peer);
    if (send_bytes[p] > 0) {
      TUTTI_RETURN_IF_ERROR(
          check(ncclSend(in + send_offsets[p], send_bytes[p], ncclUint8, peer, comm_, stream_),
                "ncclSend (alltoallv)"));
    }
    if (recv_bytes[p] > 0) {
      TUTTI_RETURN_IF_ERROR(
          check(ncclRecv(out + recv_offsets[p], recv_bytes[p], ncclUint8, peer, comm_, stream_),
                "ncclRecv (alltoallv)"));
    }
  }
  TUTTI_RETURN_IF_ERROR(check(ncclGroupEnd(), "ncclGroupEnd (alltoallv)"));
  return finish("alltoallv (grouped ncclSend/ncclRecv)");
}

Status NcclBackend::reducescatter(const void* input, void* output,
                                  const std::vector<size_t>& counts, DataType dtype, ReduceOp op) {
  TUTTI_NCCL_ENTER();
  const NcclType t = ncclTypeOf(dtype, op);
  if (allEqual(counts)) {
    if (counts[0] == 0) return Status::ok();
    TUTTI_RETURN_IF_ERROR(
        check(ncclReduceScatter(input, output, counts[0], t.type, t.op, comm_, stream_),
              "ncclReduceScatter"));
    return finish("ncclReduceScatter");
  }
  // Uneven blocks: each block is reduced to its rank, grouped into one launch.
  const std::vector<size_t> offsets = offsetsOf(counts);
  const size_t element = dataTypeSize(dtype);
  const char* in = static_cast<const char*>(input);
  TUTTI_RETURN_IF_ERROR(check(ncclGroupStart(), "ncclGroupStart"));
  for (int root = 0; root < size_; ++root) {
    const size_t r = static_cast<size_t>(root);
    if (counts[r] == 0) continue;
    TUTTI_RETURN_IF_ERROR(check(ncclReduce(in + offsets[r] * element, output, counts[r], t.type,
                                           t.op, root, comm_, stream_),
                                "ncclReduce (reducescatter)"));
  }
  TUTTI_RETURN_IF_ERROR(check(ncclGroupEnd(), "ncclGroupEnd (reducescatter)"));
  return finish("reducescatter (grouped ncclReduce)");
}

Status NcclBackend::barrier() {
  TUTTI_NCCL_ENTER();
  TUTTI_RETURN_IF_ERROR(
      check(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_, stream_),
            "ncclAllReduce (barrier)"));
  return finish("ncclAllReduce (barrier)");
}

#undef TUTTI_NCCL_ENTER

}  // namespace tutti

#include "coordinator/device_executor.h"

#include <numeric>
#include <string>

#include "coordinator/op_arithmetic.h"
#include "coordinator/request_validation.h"
#include "coordinator/response_layout.h"
#include "core/check.h"
#include "ops/reduce.h"

namespace tutti {
namespace {

std::string prefix(const Request& r) {
  return std::string(opTypeName(r.type)) + " '" + r.name + "': ";
}

bool isReduction(OpType type) {
  return type == OpType::kAllreduce || type == OpType::kReducescatter;
}

}  // namespace

DeviceExecutor::DeviceExecutor(const BackendBundle& bundle, int rank, int size)
    : rank_(rank),
      size_(size),
      open_device_(bundle.open_device),
      connect_device_backend_(bundle.connect_device_backend),
      connect_device_set_(bundle.connect_device_set) {}

DeviceExecutor::~DeviceExecutor() = default;

Status DeviceExecutor::prepare(const Request& r, const TensorView& input, const TensorView* output,
                               std::shared_ptr<DeviceEvent>* ready) {
  if (r.type == OpType::kBarrier || r.type == OpType::kJoin) return Status::ok();
  if (output != nullptr &&
      (output->device != input.device ||
       (input.device == DeviceType::kCuda && output->device_id != input.device_id))) {
    return Status::invalidArgument(
        prefix(r) + "input and output must be on the same device (input " +
        (input.device == DeviceType::kCuda ? "cuda:" + std::to_string(input.device_id) : "cpu") +
        ", output " +
        (output->device == DeviceType::kCuda ? "cuda:" + std::to_string(output->device_id)
                                             : "cpu") +
        ")");
  }
  if (input.device != DeviceType::kCuda) return Status::ok();
  if (!open_device_) {
    return Status::invalidArgument(prefix(r) +
                                   "the input is on a CUDA device but this build of tutti has no "
                                   "CUDA support (rebuild with the CUDA toolkit found; "
                                   "tutti_built_with(\"cuda\") tells)");
  }
  if (input.device_id < 0) {
    return Status::invalidArgument(prefix(r) + "a CUDA tensor needs device_id >= 0, got " +
                                   std::to_string(input.device_id));
  }
  DeviceContext* ctx = context_ptr_.load(std::memory_order_acquire);
  if (ctx == nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!context_) {
      TUTTI_RETURN_IF_ERROR(open_device_(input.device_id, &context_));
      context_ptr_.store(context_.get(), std::memory_order_release);
    }
    ctx = context_.get();
  }
  if (ctx->deviceId() != input.device_id) {
    return Status::invalidArgument(prefix(r) + "the input is on CUDA device " +
                                   std::to_string(input.device_id) + " but this rank uses device " +
                                   std::to_string(ctx->deviceId()) +
                                   " (its first CUDA tensor's): one device per rank");
  }
  return ctx->recordOn(input.stream, ready);
}

Status DeviceExecutor::context(DeviceContext** out) {
  *out = context_ptr_.load(std::memory_order_acquire);
  if (*out != nullptr) return Status::ok();
  // A rank that enqueued no CUDA tensor yet (it joined) still takes part:
  // it opens the current device.
  if (!open_device_) return Status::internal("a CUDA response reached a build without CUDA");
  std::lock_guard<std::mutex> lock(mu_);
  if (!context_) {
    TUTTI_RETURN_IF_ERROR(open_device_(-1, &context_));
    context_ptr_.store(context_.get(), std::memory_order_release);
  }
  *out = context_.get();
  return Status::ok();
}

Status DeviceExecutor::directBackend(DeviceContext& ctx, const Response& r, Backend& host,
                                     DeviceBackend** out) {
  *out = nullptr;
  if (r.process_set == kGlobalProcessSet) {
    if (!connect_device_backend_) return Status::ok();
    return sets_.get(
        r.process_set,
        [&](std::unique_ptr<DeviceBackend>* b) { return connect_device_backend_(ctx, b); }, out);
  }
  if (!connect_device_set_) return Status::ok();
  return sets_.get(
      r.process_set,
      [&](std::unique_ptr<DeviceBackend>* b) { return connect_device_set_(ctx, host, b); }, out);
}

template <typename Fn>
Status DeviceExecutor::collectiveInPlace(Backend* direct, Backend& host, void* buf, size_t bytes,
                                         bool copy_in, Fn&& fn) {
  if (direct != nullptr) return fn(*direct, buf);
  DeviceContext& ctx = *context_ptr_.load(std::memory_order_acquire);
  void* pinned = nullptr;
  TUTTI_RETURN_IF_ERROR(ctx.pinnedBuffer(bytes, &pinned));
  if (copy_in) TUTTI_RETURN_IF_ERROR(ctx.copy(pinned, buf, bytes));
  TUTTI_RETURN_IF_ERROR(ctx.synchronize());
  TUTTI_RETURN_IF_ERROR(fn(host, pinned));
  return ctx.copy(buf, pinned, bytes);
}

Status DeviceExecutor::execute(const Response& r, const std::vector<const TensorEntry*>& entries,
                               std::vector<Completion>* completions, Backend& host, int rank,
                               int size, Compressor* compressor, CompressorSet* compressors) {
  TUTTI_CHECK(compressor == nullptr || (r.type == OpType::kAllreduce && compressors != nullptr));
  TUTTI_CHECK_EQ(entries.size(), r.names.size());
  completions->assign(r.names.size(), Completion{});
  rank_ = rank;
  size_ = size;
  DeviceContext* ctx = nullptr;
  TUTTI_RETURN_IF_ERROR(context(&ctx));
  // Adasum is staged through the host backend: it opens no device backend.
  const bool adasum = r.type == OpType::kAllreduce && r.reduce_op == ReduceOp::kAdasum;
  DeviceBackend* device_backend = nullptr;
  if (!adasum) TUTTI_RETURN_IF_ERROR(directBackend(*ctx, r, host, &device_backend));
  Backend* direct = device_backend;
  // The type the collective reduces: the 16-bit wire type of a cast.
  const DataType reduced =
      compressor != nullptr && compressor->exchangeKind() == ExchangeKind::kAllreduce
          ? compressor->wireDType(r.dtype)
          : r.dtype;
  if (device_backend != nullptr && isReduction(r.type) && !device_backend->reduces(reduced)) {
    direct = nullptr;  // e.g. int16 on NCCL: staged through the host backend
  }
  for (const TensorEntry* e : entries) {
    if (e != nullptr && e->ready) TUTTI_RETURN_IF_ERROR(ctx->waitFor(*e->ready));
  }
  Status st;
  switch (r.type) {
    case OpType::kAllreduce:
      st = allreduce(*ctx, direct, host, r, entries, compressor, compressors);
      break;
    case OpType::kAllgather:
      st = allgather(*ctx, direct, host, r, entries[0], &(*completions)[0]);
      break;
    case OpType::kBroadcast:
      st = broadcast(*ctx, direct, host, r, entries[0]);
      break;
    case OpType::kAlltoall:
      st = alltoall(*ctx, direct, host, r, entries[0], &(*completions)[0]);
      break;
    case OpType::kReducescatter:
      st = reducescatter(*ctx, direct, host, r, entries[0], &(*completions)[0]);
      break;
    case OpType::kBarrier:
    case OpType::kJoin:
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
      return Status::internal(std::string(opTypeName(r.type)) +
                              " carries no tensor and never runs on a device");
    case OpType::kSend:
    case OpType::kRecv:
      return Status::internal(std::string(opTypeName(r.type)) +
                              " takes CPU tensors only (coordinator/point_to_point.h)");
  }
  TUTTI_RETURN_IF_ERROR(st);
  return ctx->synchronize();
}

Status DeviceExecutor::allreduce(DeviceContext& ctx, Backend* direct, Backend& host,
                                 const Response& r, const std::vector<const TensorEntry*>& entries,
                                 Compressor* compressor, CompressorSet* compressors) {
  TUTTI_CHECK_EQ(r.sizes.size(), r.names.size());
  const size_t elem = dataTypeSize(r.dtype);
  const ReduceOp op = backendOp(r.reduce_op);
  const size_t total =
      static_cast<size_t>(std::accumulate(r.sizes.begin(), r.sizes.end(), int64_t{0}));
  const bool alone = r.names.size() == 1 && entries[0] != nullptr;
  uint8_t* buf = nullptr;
  if (alone) {
    // Reduced directly in the caller's output buffer.
    const TensorEntry& e = *entries[0];
    TUTTI_CHECK_EQ(static_cast<int64_t>(total), e.input.numElements());
    buf = static_cast<uint8_t*>(e.output.data);
    TUTTI_RETURN_IF_ERROR(ctx.copy(buf, e.input.data, total * elem));
  } else {
    void* fusion = nullptr;
    TUTTI_RETURN_IF_ERROR(ctx.deviceBuffer(DeviceContext::Slot::kFusion, total * elem, &fusion));
    buf = static_cast<uint8_t*>(fusion);
    std::vector<DeviceCopy> in;
    size_t offset = 0;
    for (size_t i = 0; i < r.names.size(); ++i) {
      const size_t bytes = static_cast<size_t>(r.sizes[i]) * elem;
      if (entries[i] != nullptr) {
        TUTTI_CHECK_EQ(r.sizes[i], entries[i]->input.numElements());
        in.push_back({entries[i]->input.data, buf + offset, bytes});
      } else {
        TUTTI_RETURN_IF_ERROR(ctx.fillZero(buf + offset, bytes));  // a joined rank's zeros
      }
      offset += bytes;
    }
    TUTTI_RETURN_IF_ERROR(ctx.copyBatch(in));
  }
  if (compressor == nullptr) {
    TUTTI_RETURN_IF_ERROR(ctx.scale(buf, total, r.dtype, r.prescale));
    const std::vector<size_t> counts(r.sizes.begin(), r.sizes.end());
    TUTTI_RETURN_IF_ERROR(
        collectiveInPlace(direct, host, buf, total * elem, true, [&](Backend& b, void* p) {
          // Adasum: direct is null (execute()).
          return op == ReduceOp::kAdasum ? b.adasumAllreduce(p, counts, r.dtype)
                                         : b.allreduce(p, total, r.dtype, op);
        }));
    TUTTI_RETURN_IF_ERROR(ctx.scale(buf, total, r.dtype, r.postscale, averageDivisor(r, size_)));
  } else if (compressor->exchangeKind() == ExchangeKind::kAllreduce) {
    TUTTI_RETURN_IF_ERROR(castReduce(ctx, direct, host, r, buf, total, *compressor));
  } else {
    TUTTI_RETURN_IF_ERROR(
        hostCompressedReduce(ctx, host, r, entries, buf, total, *compressor, *compressors));
  }
  if (alone) return Status::ok();
  std::vector<DeviceCopy> out;
  size_t offset = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    const size_t bytes = static_cast<size_t>(r.sizes[i]) * elem;
    if (entries[i] != nullptr) out.push_back({buf + offset, entries[i]->output.data, bytes});
    offset += bytes;
  }
  return ctx.copyBatch(out);
}

Status DeviceExecutor::castReduce(DeviceContext& ctx, Backend* direct, Backend& host,
                                  const Response& r, void* buf, size_t total,
                                  const Compressor& compressor) {
  // As the host's cast path (coordinator/compressed_allreduce.cc): 1/size
  // before the 16-bit sum, so that it stays in range.
  const double pre = r.prescale * averageFactor(r, size_);
  TUTTI_RETURN_IF_ERROR(ctx.scale(buf, total, r.dtype, pre));
  const DataType wire = compressor.wireDType(r.dtype);
  const size_t wire_bytes = total * dataTypeSize(wire);
  void* packed = nullptr;
  TUTTI_RETURN_IF_ERROR(ctx.deviceBuffer(DeviceContext::Slot::kWire, wire_bytes, &packed));
  TUTTI_RETURN_IF_ERROR(ctx.cast(buf, r.dtype, packed, wire, total));
  TUTTI_RETURN_IF_ERROR(collectiveInPlace(
      direct, host, packed, wire_bytes, true,
      [&](Backend& b, void* p) { return b.allreduce(p, total, wire, ReduceOp::kSum); }));
  TUTTI_RETURN_IF_ERROR(ctx.cast(packed, wire, buf, r.dtype, total));
  return ctx.scale(buf, total, r.dtype, r.postscale);
}

Status DeviceExecutor::hostCompressedReduce(DeviceContext& ctx, Backend& host, const Response& r,
                                            const std::vector<const TensorEntry*>& entries,
                                            void* buf, size_t total, Compressor& compressor,
                                            CompressorSet& compressors) {
  const size_t bytes = total * dataTypeSize(r.dtype);
  void* pinned = nullptr;
  TUTTI_RETURN_IF_ERROR(ctx.pinnedBuffer(bytes, &pinned));
  TUTTI_RETURN_IF_ERROR(ctx.copy(pinned, buf, bytes));
  TUTTI_RETURN_IF_ERROR(ctx.synchronize());
  // The host stage reads and writes each tensor's slice of the pinned copy
  // (input and output one buffer, which it allows); a joined rank's tensors
  // stay null entries there too, so both paths see the same contributions.
  Response staged = r;
  staged.device = DeviceType::kCpu;
  std::vector<TensorEntry> slices(r.names.size());
  std::vector<const TensorEntry*> views(r.names.size(), nullptr);
  size_t offset = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    const int64_t count = r.sizes[i];
    if (entries[i] != nullptr) {
      TensorView v;
      v.data = static_cast<uint8_t*>(pinned) + offset;
      v.dtype = r.dtype;
      v.shape = {count};
      slices[i].input = v;
      slices[i].output = v;
      views[i] = &slices[i];
    }
    offset += static_cast<size_t>(count) * dataTypeSize(r.dtype);
  }
  TUTTI_RETURN_IF_ERROR(compressedAllreduce(staged, views, compressor, compressors, host, size_,
                                            &compression_scratch_));
  return ctx.copy(buf, pinned, bytes);
}

Status DeviceExecutor::broadcast(DeviceContext& ctx, Backend* direct, Backend& host,
                                 const Response& r, const TensorEntry* e) {
  TUTTI_CHECK(e != nullptr);
  const size_t bytes = e->output.numBytes();
  if (bytes == 0) return Status::ok();
  if (rank_ == r.root) TUTTI_RETURN_IF_ERROR(ctx.copy(e->output.data, e->input.data, bytes));
  return collectiveInPlace(direct, host, e->output.data, bytes, rank_ == r.root,
                           [&](Backend& b, void* p) { return b.broadcast(p, bytes, r.root); });
}

Status DeviceExecutor::allgather(DeviceContext& ctx, Backend* direct, Backend& host,
                                 const Response& r, const TensorEntry* e, Completion* done) {
  TUTTI_CHECK(e != nullptr);
  const AllgatherLayout layout = allgatherLayout(r, size_);
  const std::vector<size_t>& bytes_per_rank = layout.bytes_per_rank;
  const size_t total = layout.totalBytes();
  const size_t mine = bytes_per_rank[rank_];
  done->setOutput(r.dtype, withFirstDim(e->input.shape, layout.rows), total);
  if (direct != nullptr) {
    void* out = nullptr;
    TUTTI_RETURN_IF_ERROR(ctx.deviceBuffer(DeviceContext::Slot::kOutput, total, &out));
    TUTTI_RETURN_IF_ERROR(direct->allgatherv(e->input.data, out, bytes_per_rank));
    return ctx.copy(done->output.bytes.data(), out, total);
  }
  void* pinned = nullptr;
  TUTTI_RETURN_IF_ERROR(ctx.pinnedBuffer(mine, &pinned));
  TUTTI_RETURN_IF_ERROR(ctx.copy(pinned, e->input.data, mine));
  TUTTI_RETURN_IF_ERROR(ctx.synchronize());
  return host.allgatherv(pinned, done->output.bytes.data(), bytes_per_rank);
}

Status DeviceExecutor::alltoall(DeviceContext& ctx, Backend* direct, Backend& host,
                                const Response& r, const TensorEntry* e, Completion* done) {
  TUTTI_CHECK(e != nullptr);
  const AlltoallLayout layout = alltoallLayout(r, rank_, size_);
  const std::vector<size_t>& send = layout.send_bytes;
  const std::vector<size_t>& recv = layout.recv_bytes;
  const size_t sent = layout.sent_bytes;
  const size_t total = layout.totalBytes();
  done->received_splits = layout.received_splits;
  done->setOutput(r.dtype, withFirstDim(e->input.shape, layout.rows), total);
  if (direct != nullptr) {
    void* out = nullptr;
    TUTTI_RETURN_IF_ERROR(ctx.deviceBuffer(DeviceContext::Slot::kOutput, total, &out));
    TUTTI_RETURN_IF_ERROR(direct->alltoallv(e->input.data, send, out, recv));
    return ctx.copy(done->output.bytes.data(), out, total);
  }
  void* pinned = nullptr;
  TUTTI_RETURN_IF_ERROR(ctx.pinnedBuffer(sent, &pinned));
  TUTTI_RETURN_IF_ERROR(ctx.copy(pinned, e->input.data, sent));
  TUTTI_RETURN_IF_ERROR(ctx.synchronize());
  return host.alltoallv(pinned, send, done->output.bytes.data(), recv);
}

Status DeviceExecutor::reducescatter(DeviceContext& ctx, Backend* direct, Backend& host,
                                     const Response& r, const TensorEntry* e, Completion* done) {
  const ReducescatterLayout layout = reducescatterLayout(r, size_);
  const int64_t total = layout.total;
  const int64_t first_dim = layout.first_dim;
  const std::vector<size_t>& counts = layout.counts;
  const size_t elem = dataTypeSize(r.dtype);
  const size_t total_bytes = static_cast<size_t>(total) * elem;
  // Staged (prescaled, or zeros for a joined rank) so that the caller's
  // tensor is never modified.
  void* fusion = nullptr;
  TUTTI_RETURN_IF_ERROR(ctx.deviceBuffer(DeviceContext::Slot::kFusion, total_bytes, &fusion));
  if (e != nullptr) {
    TUTTI_RETURN_IF_ERROR(ctx.copy(fusion, e->input.data, total_bytes));
    TUTTI_RETURN_IF_ERROR(ctx.scale(fusion, static_cast<size_t>(total), r.dtype, r.prescale));
  } else {
    TUTTI_RETURN_IF_ERROR(ctx.fillZero(fusion, total_bytes));
  }
  OwnedTensor out;
  out.dtype = r.dtype;
  out.shape = e != nullptr
                  ? withFirstDim(e->input.shape, reducescatterRows(first_dim, rank_, size_))
                  : Shape{static_cast<int64_t>(counts[rank_])};
  const size_t mine = counts[rank_];
  out.bytes.resize(mine * elem);
  const ReduceOp op = backendOp(r.reduce_op);
  if (direct != nullptr) {
    void* dev_out = nullptr;
    TUTTI_RETURN_IF_ERROR(ctx.deviceBuffer(DeviceContext::Slot::kOutput, mine * elem, &dev_out));
    TUTTI_RETURN_IF_ERROR(direct->reducescatter(fusion, dev_out, counts, r.dtype, op));
    TUTTI_RETURN_IF_ERROR(ctx.scale(dev_out, mine, r.dtype, r.postscale, averageDivisor(r, size_)));
    TUTTI_RETURN_IF_ERROR(ctx.copy(out.bytes.data(), dev_out, mine * elem));
    TUTTI_RETURN_IF_ERROR(ctx.synchronize());
  } else {
    void* pinned = nullptr;
    TUTTI_RETURN_IF_ERROR(ctx.pinnedBuffer(total_bytes, &pinned));
    TUTTI_RETURN_IF_ERROR(ctx.copy(pinned, fusion, total_bytes));
    TUTTI_RETURN_IF_ERROR(ctx.synchronize());
    TUTTI_RETURN_IF_ERROR(host.reducescatter(pinned, out.bytes.data(), counts, r.dtype, op));
    scaleInPlace(out.bytes.data(), mine, r.dtype, r.postscale, averageDivisor(r, size_));
  }
  done->has_output = true;
  done->output = std::move(out);
  return Status::ok();
}

}  // namespace tutti

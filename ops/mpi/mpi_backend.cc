#include "ops/mpi/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "ops/algorithms/allreduce_adasum.h"
#include "ops/mpi/mpi_environment.h"
#include "ops/mpi/mpi_wait.h"

namespace tutti {
namespace {

struct Reduction {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
};

MPI_Op predefinedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // the coordinator sums and scales
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kAdasum:  // not element-wise: MpiBackend::adasumAllreduce
      break;
  }
  return MPI_OP_NULL;
}

Reduction reductionFor(DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8:
      return {MPI_UINT8_T, predefinedOp(op)};
    case DataType::kInt8:
      return {MPI_INT8_T, predefinedOp(op)};
    case DataType::kInt16:
      return {MPI_INT16_T, predefinedOp(op)};
    case DataType::kInt32:
      return {MPI_INT32_T, predefinedOp(op)};
    case DataType::kInt64:
      return {MPI_INT64_T, predefinedOp(op)};
    case DataType::kUInt16:
      return {MPI_UINT16_T, predefinedOp(op)};
    case DataType::kUInt32:
      return {MPI_UINT32_T, predefinedOp(op)};
    case DataType::kUInt64:
      return {MPI_UINT64_T, predefinedOp(op)};
    case DataType::kFloat32:
      return {MPI_FLOAT, predefinedOp(op)};
    case DataType::kFloat64:
      return {MPI_DOUBLE, predefinedOp(op)};
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return {MPI_UINT16_T, halfPrecisionOp(dtype, op)};
    case DataType::kBool:
      // One byte, 0 or 1: logical or for sum and max, and for min and product.
      return {MPI_UINT8_T, (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? MPI_LAND : MPI_LOR};
  }
  return {};
}

std::vector<size_t> offsetsOf(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

std::vector<int> asInts(const std::vector<size_t>& values) {
  return std::vector<int>(values.begin(), values.end());
}

}  // namespace

MpiBackend::MpiBackend(MpiTransport& transport, size_t max_chunk_bytes)
    : MpiBackend(transport, transport.comm(), transport.waitScope(), max_chunk_bytes) {}

MpiBackend::MpiBackend(Transport& p2p, MPI_Comm comm, MpiWaitScope scope, size_t max_chunk_bytes)
    : transport_(p2p),
      comm_(comm),
      scope_(std::move(scope)),
      max_chunk_bytes_(std::clamp<size_t>(max_chunk_bytes, 1, static_cast<size_t>(INT_MAX))) {}

Status MpiBackend::check(int code, MPI_Request request, const char* call) {
  if (!broken_.isOk()) return broken_;
  if (code != MPI_SUCCESS) {
    broken_ = mpiStatus(code, call, scope_.rank);
    return broken_;
  }
  std::vector<MPI_Request> requests{request};
  Status st = waitMpiRequests(&requests, call, scope_);
  if (!st.isOk()) broken_ = st;
  return st;
}

bool MpiBackend::fitsOneCall(const std::vector<size_t>& bytes) const {
  size_t total = 0;
  for (size_t b : bytes) {
    if (b > max_chunk_bytes_) return false;
    total += b;
  }
  return total <= static_cast<size_t>(INT_MAX);
}

Status MpiBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (!broken_.isOk()) return broken_;
  const Reduction r = reductionFor(dtype, op);
  const size_t element = dataTypeSize(dtype);
  const size_t chunk =
      std::max<size_t>(1, std::min(max_chunk_bytes_, kAllreducePieceBytes) / element);
  char* p = static_cast<char*>(buf);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(chunk, count - done);
    MPI_Request req = MPI_REQUEST_NULL;
    const int code = MPI_Iallreduce(MPI_IN_PLACE, p + done * element, static_cast<int>(n), r.type,
                                    r.op, comm_, &req);
    TUTTI_RETURN_IF_ERROR(check(code, req, "MPI_Iallreduce"));
    done += n;
  }
  return Status::ok();
}

Status MpiBackend::adasumAllreduce(void* buf, const std::vector<size_t>& counts, DataType dtype) {
  if (!broken_.isOk()) return broken_;
  Status st = allreduceAdasum(transport_, buf, counts, dtype, &adasum_scratch_);
  if (st.code() == StatusCode::kPeerLost) broken_ = st;
  return st;
}

Status MpiBackend::allgatherv(const void* input, void* output,
                              const std::vector<size_t>& bytes_per_rank) {
  if (!broken_.isOk()) return broken_;
  const std::vector<size_t> offsets = offsetsOf(bytes_per_rank);
  char* out = static_cast<char*>(output);
  const size_t mine = bytes_per_rank[static_cast<size_t>(rank())];
  char* my_block = out + offsets[static_cast<size_t>(rank())];
  if (fitsOneCall(bytes_per_rank)) {
    const std::vector<int> counts = asInts(bytes_per_rank);
    const std::vector<int> displs = asInts(offsets);
    const void* send = input == my_block ? MPI_IN_PLACE : input;
    MPI_Request req = MPI_REQUEST_NULL;
    const int code = MPI_Iallgatherv(send, static_cast<int>(mine), MPI_BYTE, output, counts.data(),
                                     displs.data(), MPI_BYTE, comm_, &req);
    return check(code, req, "MPI_Iallgatherv");
  }
  // Too large for int counts: every rank broadcasts its block in chunks.
  if (mine > 0 && input != my_block) std::memmove(my_block, input, mine);
  for (int root = 0; root < size(); ++root) {
    const size_t r = static_cast<size_t>(root);
    TUTTI_RETURN_IF_ERROR(broadcast(out + offsets[r], bytes_per_rank[r], root));
  }
  return Status::ok();
}

Status MpiBackend::broadcast(void* buf, size_t bytes, int root) {
  if (!broken_.isOk()) return broken_;
  char* p = static_cast<char*>(buf);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(max_chunk_bytes_, bytes - done);
    MPI_Request req = MPI_REQUEST_NULL;
    const int code = MPI_Ibcast(p + done, static_cast<int>(n), MPI_BYTE, root, comm_, &req);
    TUTTI_RETURN_IF_ERROR(check(code, req, "MPI_Ibcast"));
    done += n;
  }
  return Status::ok();
}

Status MpiBackend::alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                             const std::vector<size_t>& recv_bytes) {
  if (!broken_.isOk()) return broken_;
  const std::vector<size_t> send_offsets = offsetsOf(send_bytes);
  const std::vector<size_t> recv_offsets = offsetsOf(recv_bytes);
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  if (fitsOneCall(send_bytes) && fitsOneCall(recv_bytes)) {
    const std::vector<int> scounts = asInts(send_bytes), sdispls = asInts(send_offsets);
    const std::vector<int> rcounts = asInts(recv_bytes), rdispls = asInts(recv_offsets);
    MPI_Request req = MPI_REQUEST_NULL;
    const int code = MPI_Ialltoallv(input, scounts.data(), sdispls.data(), MPI_BYTE, output,
                                    rcounts.data(), rdispls.data(), MPI_BYTE, comm_, &req);
    return check(code, req, "MPI_Ialltoallv");
  }
  // Too large for int counts: point-to-point exchange with every peer (the
  // transport splits large messages).
  const size_t me = static_cast<size_t>(rank());
  if (send_bytes[me] > 0)
    std::memcpy(out + recv_offsets[me], in + send_offsets[me], send_bytes[me]);
  for (int peer = 0; peer < size(); ++peer) {
    const size_t p = static_cast<size_t>(peer);
    if (p == me) continue;
    if (recv_bytes[p] > 0) transport_.postRecv(peer, out + recv_offsets[p], recv_bytes[p]);
    if (send_bytes[p] > 0) transport_.postSend(peer, in + send_offsets[p], send_bytes[p]);
  }
  Status st = transport_.waitAll();
  if (!st.isOk() && broken_.isOk()) broken_ = st;
  return st;
}

Status MpiBackend::reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                                 DataType dtype, ReduceOp op) {
  if (!broken_.isOk()) return broken_;
  const Reduction r = reductionFor(dtype, op);
  const size_t element = dataTypeSize(dtype);
  std::vector<size_t> bytes(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) bytes[i] = counts[i] * element;
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (fitsOneCall(bytes) && total <= static_cast<size_t>(INT_MAX)) {
    if (total == 0) return Status::ok();
    const std::vector<int> recvcounts = asInts(counts);
    MPI_Request req = MPI_REQUEST_NULL;
    const int code =
        MPI_Ireduce_scatter(input, output, recvcounts.data(), r.type, r.op, comm_, &req);
    return check(code, req, "MPI_Ireduce_scatter");
  }
  // Too large for int counts: reduce each rank's block to it, in chunks.
  const std::vector<size_t> offsets = offsetsOf(counts);
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  const size_t chunk = std::max<size_t>(1, max_chunk_bytes_ / element);
  for (int root = 0; root < size(); ++root) {
    const size_t rr = static_cast<size_t>(root);
    for (size_t done = 0; done < counts[rr];) {
      const size_t n = std::min(chunk, counts[rr] - done);
      void* recv = root == rank() ? out + done * element : nullptr;
      MPI_Request req = MPI_REQUEST_NULL;
      const int code = MPI_Ireduce(in + (offsets[rr] + done) * element, recv, static_cast<int>(n),
                                   r.type, r.op, root, comm_, &req);
      TUTTI_RETURN_IF_ERROR(check(code, req, "MPI_Ireduce"));
      done += n;
    }
  }
  return Status::ok();
}

Status MpiBackend::barrier() {
  if (!broken_.isOk()) return broken_;
  MPI_Request req = MPI_REQUEST_NULL;
  const int code = MPI_Ibarrier(comm_, &req);
  return check(code, req, "MPI_Ibarrier");
}

Status MpiBackend::send(const void* data, size_t bytes, int peer) {
  if (!broken_.isOk()) return broken_;
  return transport_.wait(transport_.postSend(peer, data, bytes));
}

Status MpiBackend::recv(void* data, size_t bytes, int peer) {
  if (!broken_.isOk()) return broken_;
  return transport_.wait(transport_.postRecv(peer, data, bytes));
}

}  // namespace tutti

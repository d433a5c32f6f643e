#include "ops/tcp/tcp_backend.h"

#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "core/check.h"
#include "core/logging.h"
#include "ops/algorithms/allgather_hierarchical.h"
#include "ops/algorithms/allgather_ring.h"
#include "ops/algorithms/allreduce_adasum.h"
#include "ops/algorithms/allreduce_hierarchical.h"
#include "ops/algorithms/allreduce_recursive_doubling.h"
#include "ops/algorithms/allreduce_ring.h"
#include "ops/algorithms/alltoall_pairwise.h"
#include "ops/algorithms/barrier_dissemination.h"
#include "ops/algorithms/broadcast_binomial.h"
#include "ops/algorithms/broadcast_chain.h"
#include "ops/algorithms/broadcast_hierarchical.h"
#include "ops/algorithms/reducescatter_ring.h"
#include "ops/algorithms/ring.h"

namespace tutti {
namespace {

// What every TcpBackend runs over (sockets, shared memory, a process set's
// subset of them): the algorithm table's transport name.
constexpr const char* kTransportName = "tcp";

Status checkPerRank(const char* what, const std::vector<size_t>& v, int size) {
  if (v.size() == static_cast<size_t>(size)) return Status::ok();
  std::ostringstream msg;
  msg << what << " has " << v.size() << " entries but the world has " << size << " ranks";
  return Status::invalidArgument(msg.str());
}

}  // namespace

TcpBackend::TcpBackend(Transport& transport, size_t segment_bytes,
                       std::vector<AlgorithmOverride> overrides, const TcpHierarchy& hierarchy)
    : transport_(transport),
      segment_bytes_(segment_bytes),
      overrides_(std::move(overrides)),
      groups_(transport, hierarchy.host_of_rank),
      hierarchical_allreduce_(hierarchy.allreduce != "0"),
      hierarchical_allgather_(hierarchy.allgather != "0") {
  const HostLayout& layout = groups_.layout();
  const std::pair<const char*, const std::string*> modes[] = {{"allreduce", &hierarchy.allreduce},
                                                              {"allgather", &hierarchy.allgather}};
  for (const auto& [collective, mode] : modes) {
    if (*mode == "1") {
      std::vector<AlgorithmOverride> forced;
      TUTTI_CHECK(
          parseAlgorithmOverrides(std::string(collective) + ":0-inf:hierarchical", &forced).isOk());
      overrides_.push_back(forced.front());
    }
    if (groups_.hierarchical() && *mode != "0") {
      TUTTI_LOG(kInfo) << "rank " << transport.rank() << " of " << transport.size()
                       << ": hierarchical " << collective << " over " << layout.cross_size
                       << " hosts x " << layout.local_size << " ranks";
    } else if (*mode == "1" && transport.rank() == 0) {
      // Why the forced entry declines: "hierarchical: <reason>".
      std::string why;
      for (const std::string& d : select(collective, kNoByteLimit).declined) {
        if (why.empty() && d.rfind("hierarchical: ", 0) == 0) why = d.substr(14);
      }
      TUTTI_LOG(kWarning) << "TUTTI_HIERARCHICAL_"
                          << (std::string(collective) == "allreduce" ? "ALLREDUCE" : "ALLGATHER")
                          << "=1, but " << why << ": " << collective << " uses the flat algorithms";
    }
  }
}

AlgorithmChoice TcpBackend::select(const char* collective, uint64_t bytes) const {
  AlgorithmCase c{collective, bytes, kTransportName};
  c.local_size = groups_.layout().local_size;
  c.cross_size = groups_.layout().cross_size;
  // Broadcast has no switch of its own: TUTTI_ALGORITHMS chooses another.
  const std::string_view name(collective);
  c.hierarchical_allowed = name == "allgather"   ? hierarchical_allgather_
                           : name == "allreduce" ? hierarchical_allreduce_
                                                 : true;
  return selectAlgorithm(algorithmTable(), overrides_, c);
}

AlgorithmId TcpBackend::choose(const char* collective, uint64_t bytes) const {
  const AlgorithmChoice choice = select(collective, bytes);
  // Every collective's last table entry fits every case.
  TUTTI_CHECK(choice.entry != nullptr);
  return choice.entry->id;
}

Status TcpBackend::allreduceBySize(const void* in, void* out, size_t count, DataType dtype,
                                   ReduceOp op) {
  switch (choose("allreduce", count * dataTypeSize(dtype))) {
    case AlgorithmId::kAllreduceRecursiveDoubling:
      return allreduceRecursiveDoubling(transport_, in, out, count, dtype, op, &scratch_);
    case AlgorithmId::kAllreduceHierarchical:
      return allreduceHierarchical(groups_.local(), groups_.cross(), in, out, count, dtype, op,
                                   segment_bytes_, &scratch_, &work_);
    default:
      break;
  }
  // The ring follows the hosts, so that each link is crossed once per step.
  return allreduceRing(groups_.hostOrdered(), in, out, count, dtype, op, segment_bytes_, &scratch_);
}

int TcpBackend::rank() const {
  return transport_.rank();
}
int TcpBackend::size() const {
  return transport_.size();
}

Status TcpBackend::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  return allreduceBySize(buf, buf, count, dtype, op);
}

Status TcpBackend::allreduceOutOfPlace(const void* in, void* out, size_t count, DataType dtype,
                                       ReduceOp op) {
  return allreduceBySize(in, out, count, dtype, op);
}

Status TcpBackend::allreduceCastAcrossHosts(const void* in, void* out, size_t count, DataType dtype,
                                            ReduceOp op, DataType wire, bool* ran) {
  *ran = false;
  if (dtype != DataType::kFloat32 || (wire != DataType::kFloat16 && wire != DataType::kBFloat16)) {
    return Status::ok();
  }
  if (groups_.layout().cross_size < 2) {
    *ran = true;
    return allreduceBySize(in, out, count, dtype, op);
  }
  if (choose("allreduce", count * dataTypeSize(dtype)) != AlgorithmId::kAllreduceHierarchical) {
    return Status::ok();
  }
  *ran = true;
  return allreduceHierarchicalCast(groups_.local(), groups_.cross(), in, out, count, dtype, op,
                                   wire, segment_bytes_, &scratch_, &work_);
}

Status TcpBackend::adasumAllreduce(void* buf, const std::vector<size_t>& counts, DataType dtype) {
  return allreduceAdasum(transport_, buf, counts, dtype, &scratch_);
}

Status TcpBackend::allgatherv(const void* input, void* output,
                              const std::vector<size_t>& bytes_per_rank) {
  TUTTI_RETURN_IF_ERROR(checkPerRank("allgatherv bytes_per_rank", bytes_per_rank, size()));
  size_t total = 0;
  for (size_t b : bytes_per_rank) total += b;
  if (choose("allgather", total) == AlgorithmId::kAllgatherHierarchical) {
    return allgatherHierarchical(groups_.local(), groups_.cross(), groups_.layout(), input, output,
                                 bytes_per_rank, segment_bytes_, &work_);
  }
  // The ring follows the hosts; the output stays in rank order.
  return allgatherRing(groups_.hostOrdered(), input, output, bytes_per_rank, segment_bytes_,
                       groups_.layout().host_order);
}

Status TcpBackend::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size()) {
    return Status::invalidArgument("broadcast root " + std::to_string(root) +
                                   " is not a rank of a world of size " + std::to_string(size()));
  }
  switch (choose("broadcast", bytes)) {
    case AlgorithmId::kBroadcastHierarchical:
      return broadcastHierarchical(groups_.local(), groups_.cross(), groups_.layout(), buf, bytes,
                                   root, segment_bytes_);
    case AlgorithmId::kBroadcastBinomial:
      return broadcastBinomial(groups_.hostOrdered(), buf, bytes, groups_.hostOrderedRank(root));
    default:
      break;
  }
  // The chain follows the hosts, so that it crosses each link once.
  return broadcastChain(groups_.hostOrdered(), buf, bytes, groups_.hostOrderedRank(root),
                        segment_bytes_);
}

Status TcpBackend::alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                             const std::vector<size_t>& recv_bytes) {
  TUTTI_RETURN_IF_ERROR(checkPerRank("alltoallv send_bytes", send_bytes, size()));
  TUTTI_RETURN_IF_ERROR(checkPerRank("alltoallv recv_bytes", recv_bytes, size()));
  if (send_bytes[rank()] != recv_bytes[rank()]) {
    std::ostringstream msg;
    msg << "alltoallv on rank " << rank() << ": sends " << send_bytes[rank()]
        << " bytes to itself but expects to receive " << recv_bytes[rank()];
    return Status::invalidArgument(msg.str());
  }
  return alltoallPairwise(transport_, input, send_bytes, output, recv_bytes);
}

Status TcpBackend::reducescatter(const void* input, void* output, const std::vector<size_t>& counts,
                                 DataType dtype, ReduceOp op) {
  TUTTI_RETURN_IF_ERROR(checkPerRank("reducescatter counts", counts, size()));
  return reducescatterRing(groups_.hostOrdered(), input, output, counts, dtype, op, segment_bytes_,
                           &work_, groups_.layout().host_order);
}

Status TcpBackend::barrier() {
  return barrierDissemination(transport_);
}

Status TcpBackend::send(const void* data, size_t bytes, int peer) {
  return transport_.wait(transport_.postSend(peer, data, bytes));
}

Status TcpBackend::recv(void* data, size_t bytes, int peer) {
  return transport_.wait(transport_.postRecv(peer, data, bytes));
}

}  // namespace tutti

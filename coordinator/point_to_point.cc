#include "coordinator/point_to_point.h"

#include <algorithm>

#include "coordinator/request_validation.h"

namespace tutti {

namespace {

std::string describe(const Request& r) {
  return std::to_string(numElements(r.shape)) + " " + dataTypeName(r.dtype) + " elements (shape " +
         shapeToString(r.shape) + ", " + (r.device == DeviceType::kCpu ? "cpu" : "cuda") + ")";
}

}  // namespace

bool isPointToPoint(OpType type) {
  return type == OpType::kSend || type == OpType::kRecv;
}

std::string pointToPointName(int src, int dst, int32_t tag, int64_t seq) {
  return "p2p " + std::to_string(src) + "->" + std::to_string(dst) + " tag " + std::to_string(tag) +
         " #" + std::to_string(seq);
}

namespace {

std::string checkHead(const char* what, int peer) {
  return std::string(what) + (std::string(what) == "send" ? " to" : " from") + " rank " +
         std::to_string(peer) + ": ";
}

}  // namespace

Status checkPointToPointPeer(const char* what, int rank, int peer,
                             const std::vector<int>& set_ranks, int32_t process_set) {
  if (std::find(set_ranks.begin(), set_ranks.end(), peer) == set_ranks.end()) {
    return Status::invalidArgument(
        checkHead(what, peer) + "rank " + std::to_string(peer) + " is not in process set " +
        std::to_string(process_set) + " (ranks " +
        shapeToString(std::vector<int64_t>(set_ranks.begin(), set_ranks.end())) +
        "); the peer is the global rank of another member");
  }
  if (peer == rank) {
    return Status::invalidArgument(checkHead(what, peer) + "rank " + std::to_string(rank) +
                                   (std::string(what) == "send"
                                        ? " cannot send a message to itself"
                                        : " cannot receive a message from itself") +
                                   " (as in torch.distributed); the peer must be another member "
                                   "of the process set");
  }
  return Status::ok();
}

Status checkPointToPointTensor(const char* what, int peer, const TensorView& tensor) {
  Status view = checkTensorView(tensor, "tensor");
  if (!view.isOk()) return Status(view.code(), checkHead(what, peer) + view.message());
  if (tensor.device != DeviceType::kCpu) {
    return Status::invalidArgument(checkHead(what, peer) +
                                   "point-to-point messages take CPU tensors; got a CUDA "
                                   "tensor (copy it to the host first)");
  }
  return Status::ok();
}

Response buildPointToPointResponse(const std::string& name, const Request& send,
                                   const Request& recv, int src, int dst) {
  const std::string head = "point-to-point message '" + name + "'" +
                           (send.process_set == kGlobalProcessSet
                                ? std::string(": ")
                                : " in process set " + std::to_string(send.process_set) + ": ");
  std::string invalid;
  if (!send.error.empty()) invalid = "rank " + std::to_string(src) + ": " + send.error;
  if (!recv.error.empty()) {
    invalid += (invalid.empty() ? "" : "; ") + ("rank " + std::to_string(dst) + ": " + recv.error);
  }
  if (!invalid.empty()) {
    return errorResponse({name}, OpType::kSend, StatusCode::kInvalidArgument, head + invalid);
  }
  if (send.dtype != recv.dtype || send.device != recv.device ||
      numElements(send.shape) != numElements(recv.shape)) {
    return errorResponse({name}, OpType::kSend, StatusCode::kMismatch,
                         head + "rank " + std::to_string(src) + " sends " + describe(send) +
                             ", rank " + std::to_string(dst) + " receives into " + describe(recv) +
                             "; sender and receiver must agree on the device, the dtype and the "
                             "number of elements");
  }
  Response resp;
  resp.type = OpType::kSend;
  resp.names = {name};
  resp.dtype = send.dtype;
  resp.device = send.device;
  resp.root = recv.root;  // the sender, within the set
  resp.sizes = {send.root, numElements(send.shape)};
  resp.process_set = send.process_set;
  return resp;
}

}  // namespace tutti

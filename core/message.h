#pragma once

// Negotiation messages. Workers send RequestLists to rank 0; rank 0 sends the
// same ResponseList to every rank, and every rank executes its responses in
// order. The protocol is described in coordinator/controller.h and
// docs/negotiation.md.

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tutti {

// Collective kinds. Numeric values are part of the wire format.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  // Registration and removal of a process set: collective over the global
  // set (coordinator/process_sets.h).
  kAddProcessSet = 7,
  kRemoveProcessSet = 8,
  // Point-to-point messages (coordinator/point_to_point.h): a request of one
  // rank of a pair; rank 0 matches a kSend with its kRecv and decides one
  // kSend Response for the pair, executed by those two ranks only.
  kSend = 9,
  kRecv = 10,
};
const char* opTypeName(OpType type);

// The global process set (every rank of the job).
constexpr int32_t kGlobalProcessSet = 0;

// The key under which a rank's tensor queue, rank 0's controller and the
// response cache know a tensor: the name alone in the global set, else the
// set id and the name (the same name may be in flight in two sets at once).
std::string tensorKey(int32_t process_set, const std::string& name);
// How logs and the timeline show a tensor: the name, plus
// " (process set N)" outside the global set.
std::string displayName(int32_t process_set, const std::string& name);

// One rank's announcement that a named tensor is ready.
struct Request {
  int32_t rank = 0;
  OpType type = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  Shape shape;
  int32_t root = 0;  // broadcast; kSend/kRecv: the peer's rank within the set
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank; empty = even split
  DeviceType device = DeviceType::kCpu;
  int32_t group_id = -1;   // grouped allreduce: members are fused together; -1 = none
  int32_t group_size = 0;  // grouped allreduce: number of tensors in the group
  // Allreduce: canonical compression spec (core/compression_spec.h), the op's
  // own or the job's TUTTI_COMPRESSION; "" for other ops. Ranks must agree.
  std::string compression;
  // Non-empty: this rank's arguments failed its local checks (what was wrong
  // and what is accepted, without the "op 'name': " prefix). The request
  // still goes to rank 0, which fails the name on every rank with
  // kInvalidArgument naming this rank, so that no rank waits for it.
  std::string error;
  // The process set the op runs over (kGlobalProcessSet = every rank). For
  // a broadcast in another set, `root` is the root's rank within the set.
  // kAddProcessSet: `splits` holds the set's global ranks, ascending;
  // kRemoveProcessSet: `root` holds the set's id.
  int32_t process_set = kGlobalProcessSet;
};

struct RequestList {
  std::vector<Request> requests;
  // Response-cache hits: slot ids of cached requests this rank has ready
  // (same name and parameters as the cached entry). See coordinator/response_cache.h.
  std::vector<int64_t> cache_hits;
  bool shutdown = false;  // this rank is shutting down
};

// What every rank does next, decided by rank 0.
struct Response {
  enum class Kind : uint8_t { kOp = 0, kError = 1 };
  Kind kind = Kind::kOp;
  OpType type = OpType::kAllreduce;
  // Tensors this response covers, in fusion order. A fused allreduce has many.
  std::vector<std::string> names;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  DeviceType device = DeviceType::kCpu;
  // Allreduce: element count of each tensor in `names` (joined ranks need it).
  // Allgather: first dimension contributed by each rank, then the row shape
  //   (number of elements per row) as the last entry.
  // Alltoall: size*size matrix of rows, [sender * size + receiver], then row elements.
  // Reducescatter: element count of the whole input, then row elements.
  std::vector<int64_t> sizes;
  // Allreduce/reducescatter: ranks that joined and contribute zeros.
  std::vector<int64_t> joined_ranks;
  // Join: the last rank to join. Error: unused.
  int32_t last_joined_rank = -1;
  // Error responses: delivered to every rank's handle of each name.
  StatusCode error_code = StatusCode::kOk;
  std::string error_message;
  // Allreduce: the canonical compression spec every rank asked for ("" for
  // other ops); fusion only merges responses with the same one.
  std::string compression;
  // The process set of every name in the response; only its members execute
  // it (rank, size, joined_ranks, sizes and root are within the set).
  // kAddProcessSet: sizes holds the new set's ranks; kRemoveProcessSet: root
  // holds the id. kSend (a matched point-to-point message): root is the
  // sender's rank in the set, sizes = {receiver's rank in the set, element
  // count}; only those two ranks execute it.
  int32_t process_set = kGlobalProcessSet;
};

// Autotune (coordinator/parameter_manager.h): the knob values rank 0 chose.
// A ResponseList that carries them switches every rank to them before its
// responses execute, so every rank changes at the same response.
struct TunedParameters {
  int64_t fusion_threshold_bytes = 0;  // >= 0; 0: no fusion
  double cycle_time_ms = 0;            // >= 0, finite
  // On/off knobs, one bit each; coordinator/parameter_manager.h names the bits.
  uint32_t switches = 0;
  bool active = false;  // still tuning; false: these are the final values
  bool operator==(const TunedParameters& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_ms == o.cycle_time_ms &&
           switches == o.switches && active == o.active;
  }
  bool operator!=(const TunedParameters& o) const { return !(*this == o); }
};

struct ResponseList {
  std::vector<Response> responses;
  // Set once any rank asked to shut down (rank 0 then stops every rank), or
  // when a peer was lost: the receivers stop after executing the list.
  bool shutdown = false;
  // kPeerLost etc.: every pending and later op fails with this status.
  StatusCode abort_code = StatusCode::kOk;
  std::string abort_message;
  int32_t abort_lost_rank = -1;  // kPeerLost: Status::lostRank() (-1: not known)
  bool has_tuning = false;       // autotune: switch to `tuning` first
  TunedParameters tuning;
};

// The status a ResponseList's abort fields describe (ok when it has none).
Status abortStatus(const ResponseList& list);

std::vector<uint8_t> serialize(const RequestList& list);
std::vector<uint8_t> serialize(const ResponseList& list);
// Malformed input (truncated, out-of-range enum, trailing bytes) is kInvalidArgument.
Status deserialize(const std::vector<uint8_t>& bytes, RequestList* out);
Status deserialize(const std::vector<uint8_t>& bytes, ResponseList* out);

}  // namespace tutti

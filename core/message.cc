#include "core/message.h"

#include <cmath>

#include "core/wire.h"

namespace tutti {

const char* opTypeName(OpType type) {
  switch (type) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kJoin:
      return "join";
    case OpType::kAddProcessSet:
      return "add_process_set";
    case OpType::kRemoveProcessSet:
      return "remove_process_set";
    case OpType::kSend:
      return "send";
    case OpType::kRecv:
      return "recv";
  }
  return "invalid";
}

std::string tensorKey(int32_t process_set, const std::string& name) {
  if (process_set == kGlobalProcessSet) return name;
  // '\x1f' (unit separator) cannot start a name the APIs accept as text.
  return "\x1f" + std::to_string(process_set) + "\x1f" + name;
}

std::string displayName(int32_t process_set, const std::string& name) {
  if (process_set == kGlobalProcessSet) return name;
  return name + " (process set " + std::to_string(process_set) + ")";
}

namespace {

constexpr uint8_t kMaxOpType = static_cast<uint8_t>(OpType::kRecv);
constexpr uint32_t kMaxListLength = 1u << 22;
constexpr size_t kMaxSpecLength = 256;  // compression specs are a few characters
// The fewest bytes one encoded element takes (every field present, strings and
// vectors empty). A count that the remaining bytes cannot hold is malformed
// before anything is allocated for it: a 4-byte list header claiming 4 M
// requests must not cost rank 0 a gigabyte (found by tests/fuzz).
constexpr size_t kMinRequestBytes = 4 + 1 + 4 + 1 + 1 + 4 + 4 + 8 + 8 + 4 + 1 + 4 + 4 + 4 + 4;
constexpr size_t kMinResponseBytes = 1 + 1 + 4 + 1 + 1 + 8 + 8 + 4 + 1 + 4 + 4 + 4 + 4 + 4 + 4;
constexpr size_t kMinStringBytes = 4;

// True when `n` elements of at least `min_bytes` each fit in what is left.
bool countFits(const BufferReader& rd, uint32_t n, size_t min_bytes) {
  return n <= kMaxListLength && n <= rd.remaining() / min_bytes;
}

void write(BufferWriter& w, const Request& r) {
  w.putI32(r.rank);
  w.putU8(static_cast<uint8_t>(r.type));
  w.putString(r.name);
  w.putU8(static_cast<uint8_t>(r.dtype));
  w.putU8(static_cast<uint8_t>(r.reduce_op));
  w.putI64Vector(r.shape);
  w.putI32(r.root);
  w.putDouble(r.prescale);
  w.putDouble(r.postscale);
  w.putI64Vector(r.splits);
  w.putU8(static_cast<uint8_t>(r.device));
  w.putI32(r.group_id);
  w.putI32(r.group_size);
  w.putString(r.compression);
  w.putString(r.error);
  w.putI32(r.process_set);
}

bool read(BufferReader& rd, Request* r) {
  uint8_t type, dtype, op, device;
  bool ok = rd.getI32(&r->rank) && rd.getU8(&type) && rd.getString(&r->name) && rd.getU8(&dtype) &&
            rd.getU8(&op) && rd.getI64Vector(&r->shape) && rd.getI32(&r->root) &&
            rd.getDouble(&r->prescale) && rd.getDouble(&r->postscale) &&
            rd.getI64Vector(&r->splits) && rd.getU8(&device) && rd.getI32(&r->group_id) &&
            rd.getI32(&r->group_size) && rd.getString(&r->compression, kMaxSpecLength) &&
            rd.getString(&r->error) && rd.getI32(&r->process_set);
  if (!ok || type > kMaxOpType || !isValidDataType(dtype) || !isValidReduceOp(op) || device > 1) {
    return false;
  }
  r->type = static_cast<OpType>(type);
  r->dtype = static_cast<DataType>(dtype);
  r->reduce_op = static_cast<ReduceOp>(op);
  r->device = static_cast<DeviceType>(device);
  return true;
}

void write(BufferWriter& w, const Response& r) {
  w.putU8(static_cast<uint8_t>(r.kind));
  w.putU8(static_cast<uint8_t>(r.type));
  w.putU32(static_cast<uint32_t>(r.names.size()));
  for (const auto& n : r.names) w.putString(n);
  w.putU8(static_cast<uint8_t>(r.dtype));
  w.putU8(static_cast<uint8_t>(r.reduce_op));
  w.putDouble(r.prescale);
  w.putDouble(r.postscale);
  w.putI32(r.root);
  w.putU8(static_cast<uint8_t>(r.device));
  w.putI64Vector(r.sizes);
  w.putI64Vector(r.joined_ranks);
  w.putI32(r.last_joined_rank);
  w.putI32(static_cast<int32_t>(r.error_code));
  w.putString(r.error_message);
  w.putString(r.compression);
  w.putI32(r.process_set);
}

bool read(BufferReader& rd, Response* r) {
  uint8_t kind, type, dtype, op, device;
  uint32_t n_names;
  int32_t code;
  if (!rd.getU8(&kind) || !rd.getU8(&type) || !rd.getU32(&n_names) ||
      !countFits(rd, n_names, kMinStringBytes)) {
    return false;
  }
  r->names.resize(n_names);
  for (auto& n : r->names) {
    if (!rd.getString(&n)) return false;
  }
  bool ok = rd.getU8(&dtype) && rd.getU8(&op) && rd.getDouble(&r->prescale) &&
            rd.getDouble(&r->postscale) && rd.getI32(&r->root) && rd.getU8(&device) &&
            rd.getI64Vector(&r->sizes) && rd.getI64Vector(&r->joined_ranks) &&
            rd.getI32(&r->last_joined_rank) && rd.getI32(&code) &&
            rd.getString(&r->error_message) && rd.getString(&r->compression, kMaxSpecLength) &&
            rd.getI32(&r->process_set);
  if (!ok || kind > 1 || type > kMaxOpType || !isValidDataType(dtype) || !isValidReduceOp(op) ||
      device > 1 || code < 0 || code > static_cast<int32_t>(StatusCode::kInternal)) {
    return false;
  }
  r->kind = static_cast<Response::Kind>(kind);
  r->type = static_cast<OpType>(type);
  r->dtype = static_cast<DataType>(dtype);
  r->reduce_op = static_cast<ReduceOp>(op);
  r->device = static_cast<DeviceType>(device);
  r->error_code = static_cast<StatusCode>(code);
  return true;
}

// The autotune trailer of a response list (flag, then the values when set).
bool readTuning(BufferReader& rd, ResponseList* out) {
  uint8_t has = 0;
  if (!rd.getU8(&has) || has > 1) return false;
  out->has_tuning = has == 1;
  if (!out->has_tuning) return true;
  TunedParameters& t = out->tuning;
  uint8_t active = 0;
  if (!rd.getI64(&t.fusion_threshold_bytes) || !rd.getDouble(&t.cycle_time_ms) ||
      !rd.getU32(&t.switches) || !rd.getU8(&active) || active > 1) {
    return false;
  }
  t.active = active == 1;
  return t.fusion_threshold_bytes >= 0 && std::isfinite(t.cycle_time_ms) && t.cycle_time_ms >= 0;
}

Status malformed(const char* what) {
  return Status::invalidArgument(std::string("malformed ") + what + " message");
}

}  // namespace

std::vector<uint8_t> serialize(const RequestList& list) {
  BufferWriter w;
  w.putU32(static_cast<uint32_t>(list.requests.size()));
  for (const auto& r : list.requests) write(w, r);
  w.putI64Vector(list.cache_hits);
  w.putU8(list.shutdown ? 1 : 0);
  return w.take();
}

Status deserialize(const std::vector<uint8_t>& bytes, RequestList* out) {
  BufferReader rd(bytes);
  uint32_t n;
  if (!rd.getU32(&n) || !countFits(rd, n, kMinRequestBytes)) return malformed("request list");
  out->requests.resize(n);
  for (auto& r : out->requests) {
    if (!read(rd, &r)) return malformed("request");
  }
  uint8_t shutdown;
  if (!rd.getI64Vector(&out->cache_hits) || !rd.getU8(&shutdown) || shutdown > 1 || !rd.atEnd()) {
    return malformed("request list");
  }
  out->shutdown = shutdown == 1;
  return Status::ok();
}

std::vector<uint8_t> serialize(const ResponseList& list) {
  BufferWriter w;
  w.putU32(static_cast<uint32_t>(list.responses.size()));
  for (const auto& r : list.responses) write(w, r);
  w.putU8(list.shutdown ? 1 : 0);
  w.putI32(static_cast<int32_t>(list.abort_code));
  w.putString(list.abort_message);
  w.putI32(list.abort_lost_rank);
  w.putU8(list.has_tuning ? 1 : 0);
  if (list.has_tuning) {
    w.putI64(list.tuning.fusion_threshold_bytes);
    w.putDouble(list.tuning.cycle_time_ms);
    w.putU32(list.tuning.switches);
    w.putU8(list.tuning.active ? 1 : 0);
  }
  return w.take();
}

Status abortStatus(const ResponseList& list) {
  if (list.abort_code == StatusCode::kOk) return Status::ok();
  return Status(list.abort_code, list.abort_message).withLostRank(list.abort_lost_rank);
}

Status deserialize(const std::vector<uint8_t>& bytes, ResponseList* out) {
  BufferReader rd(bytes);
  uint32_t n;
  if (!rd.getU32(&n) || !countFits(rd, n, kMinResponseBytes)) return malformed("response list");
  out->responses.resize(n);
  for (auto& r : out->responses) {
    if (!read(rd, &r)) return malformed("response");
  }
  uint8_t shutdown;
  int32_t code;
  if (!rd.getU8(&shutdown) || shutdown > 1 || !rd.getI32(&code) || code < 0 ||
      code > static_cast<int32_t>(StatusCode::kInternal) || !rd.getString(&out->abort_message) ||
      !rd.getI32(&out->abort_lost_rank) || !readTuning(rd, out) || !rd.atEnd()) {
    return malformed("response list");
  }
  out->shutdown = shutdown == 1;
  out->abort_code = static_cast<StatusCode>(code);
  return Status::ok();
}

}  // namespace tutti

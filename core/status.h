#pragma once

#include <string>
#include <utility>

namespace tutti {

// Error codes. Numeric values are part of the wire format and of the C ABI
// (TUTTI_ERR_* in bindings/c/tutti.h): never renumber.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad input from this rank's caller (shape, dtype, splits, settings)
  kMismatch = 2,         // ranks submitted incompatible requests for one tensor name
  kPeerLost = 3,         // a peer died or its connection broke; the job cannot go on
  kShutdown = 4,         // the runtime was shut down while the op was pending
  kTimeout = 5,          // a wait with a deadline expired (the op itself may still finish)
  kStalled = 6,          // stall shutdown: some ranks never submitted the tensor
  kNotInitialized = 7,   // init() has not been called (or shutdown() was)
  kDuplicateName = 8,    // a tensor of that name is already in flight on this rank
  kIoError = 9,          // I/O failure that is not a lost peer (bind, resolve, auth)
  kInternal = 10,        // a bug in tutti
};
const char* statusCodeName(StatusCode code);

// An error is a value: a code and a message a user can act on (which tensor,
// which ranks, which values differ), plus the typed facts code acts on. Those
// are set where the fault is seen and read where it is handled, never parsed
// back out of the message (after TensorPipe's typed errors,
// tensorpipe/common/error.h):
//   lostRank()              kPeerLost: the rank whose loss this is, -1 when
//                           not known (a transport sets it for the peer it
//                           lost; rank 0's abort notice carries it to the
//                           workers, core/message.h);
//   generationSuperseded()  kShutdown from an elastic rendezvous store: the
//                           generation being formed will never complete (a
//                           newer one replaced it, or the driver ended the
//                           job; rendezvous/elastic_membership.h).
// Built with the named constructors. A Status rebuilt from code() and
// message() loses them.
class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status invalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status mismatch(std::string msg) { return {StatusCode::kMismatch, std::move(msg)}; }
  static Status peerLost(std::string msg) { return {StatusCode::kPeerLost, std::move(msg)}; }
  static Status peerLost(int lost_rank, std::string msg) {
    return peerLost(std::move(msg)).withLostRank(lost_rank);
  }
  static Status shutdown(std::string msg) { return {StatusCode::kShutdown, std::move(msg)}; }
  static Status timeout(std::string msg) { return {StatusCode::kTimeout, std::move(msg)}; }
  static Status stalled(std::string msg) { return {StatusCode::kStalled, std::move(msg)}; }
  static Status notInitialized(std::string msg) {
    return {StatusCode::kNotInitialized, std::move(msg)};
  }
  static Status duplicateName(std::string msg) {
    return {StatusCode::kDuplicateName, std::move(msg)};
  }
  static Status ioError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}

  bool isOk() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  int lostRank() const { return lost_rank_; }
  bool generationSuperseded() const { return generation_superseded_; }
  // This status with the typed fact set.
  Status withLostRank(int rank) const {
    Status s = *this;
    s.lost_rank_ = rank;
    return s;
  }
  Status asGenerationSuperseded() const {
    Status s = *this;
    s.generation_superseded_ = true;
    return s;
  }
  // "peer lost: rank 2 closed its connection" style, for logs and exceptions.
  std::string toString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  int lost_rank_ = -1;
  bool generation_superseded_ = false;
};

// Propagates a non-OK Status to the caller.
#define TUTTI_RETURN_IF_ERROR(expr) \
  do {                              \
    ::tutti::Status _st = (expr);   \
    if (!_st.isOk()) return _st;    \
  } while (0)

}  // namespace tutti

#include "core/status.h"

namespace tutti {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kMismatch:
      return "mismatch across ranks";
    case StatusCode::kPeerLost:
      return "peer lost";
    case StatusCode::kShutdown:
      return "shutdown";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kStalled:
      return "stalled";
    case StatusCode::kNotInitialized:
      return "not initialized";
    case StatusCode::kDuplicateName:
      return "duplicate name";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

}  // namespace tutti

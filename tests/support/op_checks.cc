#include "tests/support/op_checks.h"

namespace tutti {
namespace test {

::testing::AssertionResult IsOk(const Status& status) {
  if (status.isOk()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected ok, got " << status.toString();
}

::testing::AssertionResult HasCode(const Status& status, StatusCode code) {
  if (status.code() == code) return ::testing::AssertionSuccess() << status.toString();
  return ::testing::AssertionFailure()
         << "expected status '" << statusCodeName(code) << "', got " << status.toString();
}

::testing::AssertionResult ContainsAll(const std::string& text,
                                       const std::vector<std::string>& parts) {
  for (const auto& part : parts) {
    if (text.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

OpResult runOp(Runtime& rt, const Enqueue& enqueue, unsigned fetch) {
  OpResult result;
  Handle handle = -1;
  result.status = enqueue(&handle);
  if (!result.status.isOk()) {
    result.enqueue_failed = true;
    return result;
  }
  result.status = rt.wait(handle, kOpWaitSeconds);
  if (result.status.code() == StatusCode::kTimeout && !rt.poll(handle)) {
    result.status = Status::timeout("test: op did not complete within " +
                                    std::to_string(kOpWaitSeconds) + " s (hang)");
    return result;
  }
  if (result.status.isOk()) {
    if (OwnedTensor* out = rt.output(handle)) {
      result.has_output = true;
      result.output = *out;
    }
    if (fetch & kFetchSplits) result.received_splits = rt.receivedSplits(handle);
    if (fetch & kFetchJoin) result.join_result = rt.joinResult(handle);
  }
  Status released = rt.release(handle);
  EXPECT_TRUE(IsOk(released)) << "release of a completed handle";
  return result;
}

Status runOpStatus(Runtime& rt, const Enqueue& enqueue) {
  return runOp(rt, enqueue).status;
}

Status finishHandle(Runtime& rt, Handle handle) {
  Status status = rt.wait(handle, kOpWaitSeconds);
  if (status.code() == StatusCode::kTimeout && !rt.poll(handle)) {
    return Status::timeout("test: op did not complete within " + std::to_string(kOpWaitSeconds) +
                           " s (hang)");
  }
  Status released = rt.release(handle);
  EXPECT_TRUE(IsOk(released)) << "release of a completed handle";
  return status;
}

OpOptions named(const std::string& name) {
  OpOptions options;
  options.name = name;
  return options;
}

std::string indexedName(const std::string& prefix, int64_t index) {
  return prefix + "." + std::to_string(index);
}

}  // namespace test
}  // namespace tutti

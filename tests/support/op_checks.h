#pragma once

// Running one tutti op to completion from a test and checking Status values.

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "coordinator/runtime.h"
#include "core/status.h"

namespace tutti {
namespace test {

// How long a test waits for one op before calling it hung (the op itself is
// left pending; the harness shuts the runtime down).
constexpr double kOpWaitSeconds = 30;

::testing::AssertionResult IsOk(const Status& status);
// status.code() == code; the failure message shows both codes and the message.
::testing::AssertionResult HasCode(const Status& status, StatusCode code);
// `text` contains every one of `parts`.
::testing::AssertionResult ContainsAll(const std::string& text,
                                       const std::vector<std::string>& parts);

using Enqueue = std::function<Status(Handle* handle)>;

struct OpResult {
  Status status;                         // enqueue error, else the op's status
  bool enqueue_failed = false;           // status came from the enqueue call
  bool has_output = false;               // output(handle) was non-null
  OwnedTensor output;                    // copy of output(handle)
  std::vector<int64_t> received_splits;  // receivedSplits(handle), when asked for
  int join_result = -1;                  // joinResult(handle), when asked for
};

enum Fetch : unsigned { kFetchNone = 0, kFetchSplits = 1, kFetchJoin = 2 };

// Enqueues, waits at most kOpWaitSeconds, copies what the handle holds and
// releases it (checking that release succeeds).
OpResult runOp(Runtime& rt, const Enqueue& enqueue, unsigned fetch = kFetchNone);

// The op's status only (allreduce, broadcast, barrier: results are in the
// caller's buffers).
Status runOpStatus(Runtime& rt, const Enqueue& enqueue);

// Waits for an already enqueued handle, then releases it once complete.
Status finishHandle(Runtime& rt, Handle handle);

// Options with only the name set.
OpOptions named(const std::string& name);

// "name.<index>"-style helper: std::string concatenation of a prefix and number.
std::string indexedName(const std::string& prefix, int64_t index);

}  // namespace test
}  // namespace tutti

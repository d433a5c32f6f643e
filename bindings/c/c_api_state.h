#pragma once

// State of the C ABI shared by its source files (tutti_c.cc,
// tutti_collectives.cc, tutti_elastic.cc);
// internal to libtutti, never installed.
//
// The one process global of tutti: the Runtime that tutti_init() creates and,
// for an elastic worker, the ElasticWorker of the session (its store client
// and the last generation joined, which outlive each Runtime). The
// shared_mutex guards the pointers, not the objects (which are thread-safe):
// calls take it shared; init, join and shutdown take it exclusively.

#include <memory>
#include <shared_mutex>
#include <string>

#include "coordinator/elastic_worker.h"
#include "coordinator/runtime.h"
#include "core/settings.h"
#include "core/status.h"
#include "bindings/c/tutti.h"

namespace tutti_c {

struct Global {
  std::shared_mutex mutex;
  std::unique_ptr<tutti::Runtime> runtime;
  std::unique_ptr<tutti::ElasticWorker> elastic;  // created by the first elastic join
};

// Never destroyed: safe to use from atexit handlers.
Global& global();

// Stores the message as the calling thread's last error; returns the code.
int fail(const tutti::Status& status);
// TUTTI_OK, or fail(status).
int report(const tutti::Status& status);
int failNotInitialized();
inline int failInvalid(const std::string& message) {
  return fail(tutti::Status::invalidArgument(message));
}

// Argument conversions of the collectives (tutti_c.cc), each TUTTI_OK or
// fail(kInvalidArgument naming the argument): a C tensor descriptor to a view
// (`what` names it: "input", "outputs[3]"); a handle out-pointer that must
// not be NULL; a tutti_reduce_op; a name (NULL = "").
int toView(const tutti_tensor* tensor, const std::string& what, tutti::TensorView* view);
int checkHandleOut(const void* handle);
int toOp(int op, tutti::ReduceOp* out);
std::string toName(const char* name);

// Runs fn(runtime) under the shared lock; kNotInitialized without a runtime.
template <typename Fn>
int withRuntime(Fn&& fn) {
  Global& g = global();
  std::shared_lock<std::shared_mutex> lock(g.mutex);
  if (!g.runtime) return failNotInitialized();
  return fn(*g.runtime);
}

// tutti_elastic.cc. With g.mutex held exclusively and no runtime: joins the
// next generation of the elastic driver (settings.elastic_worker_id >= 0) and
// installs its runtime in g.runtime.
tutti::Status elasticJoinLocked(Global& g, const tutti::Settings& settings);

}  // namespace tutti_c

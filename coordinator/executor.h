#pragma once

// The executor: runs one op Response on this rank's Backend.
//
//  - allreduce: a single tensor is reduced directly in its output buffer
//    (input copied there first unless in place). A fused response stages
//    every tensor in the fusion buffer (one collective), then copies out.
//    prescale is applied to the staged copy, postscale (times 1/size for
//    average) to the result; integers scale in float64 and round
//    (ops/reduce.h). A rank without an entry for a name (it joined)
//    contributes zeros of the size the Response gives.
//  - allgather, alltoall, reducescatter: the output is allocated into the
//    Completion's OwnedTensor; alltoall also reports the received splits.
//  - broadcast: into the output buffer (root copies its input first).
//  - barrier: Backend::barrier(). join: no collective.
//
// Errors: the Backend's status (kPeerLost, ...) is returned; the caller
// aborts the runtime with it. Completions are filled only on success.
//
// Threading: used only by the background thread; not reentrant.

#include <vector>

#include "coordinator/fusion.h"
#include "coordinator/handle_table.h"
#include "coordinator/tensor_queue.h"
#include "core/message.h"
#include "core/status.h"
#include "ops/backend.h"

namespace tutti {

class Executor {
 public:
  // `backend` must outlive the executor.
  Executor(Backend& backend, int rank, int size);

  // entries[i] is this rank's entry for response.names[i], or nullptr.
  // completions gets one element per name (ignored where entries[i] is null).
  Status execute(const Response& response, const std::vector<const TensorEntry*>& entries,
                 std::vector<Completion>* completions);

 private:
  Status allreduce(const Response& r, const std::vector<const TensorEntry*>& entries);
  Status allgather(const Response& r, const TensorEntry* entry, Completion* done);
  Status broadcast(const Response& r, const TensorEntry* entry);
  Status alltoall(const Response& r, const TensorEntry* entry, Completion* done);
  Status reducescatter(const Response& r, const TensorEntry* entry, Completion* done);
  double outputScale(const Response& r) const;

  Backend& backend_;
  const int rank_;
  const int size_;
  FusionBuffer fusion_buffer_;
};

}  // namespace tutti

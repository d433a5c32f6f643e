#pragma once

// Checks on requests, in two places:
//  - validateLocalRequest: at enqueue, on the caller's thread, against this
//    rank's own tensors. Errors are kInvalidArgument and say which argument is
//    wrong and what is accepted. The request still goes to rank 0 with
//    Request.error set, so that the other ranks fail too (buildResponse).
//  - buildResponse: on rank 0, once every rank submitted a name, against the
//    other ranks' requests. Mismatches become an error Response (kMismatch)
//    whose message names the tensor, the ranks and the differing values:
//      allreduce 'grad.fc1': shapes differ across ranks: rank 0 [17], rank 1 [18]
//    Ranks with equal values are grouped ("ranks [0, 2] int32; ranks [1, 3]
//    float32").
//
// Pure functions: no state, no threads, no I/O.

#include <string>
#include <vector>

#include "core/message.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tutti {

// `output` is nullptr for ops whose output the runtime allocates. `size` is
// the size of the request's process set; request.root is within the set.
// ReduceOp::kAdasum is accepted on allreduce only, for CPU
// float16/float32/float64 tensors, with a power-of-two `size` (as Horovod's);
// anything else is kInvalidArgument saying what is accepted.
Status validateLocalRequest(const Request& request, const TensorView& input,
                            const TensorView* output, int size);

// Rows rank `rank` receives from a reducescatter over `first_dim` rows:
// first_dim / size, plus one for ranks below first_dim % size.
int64_t reducescatterRows(int64_t first_dim, int rank, int size);

// Builds the Response for one name. `by_rank[r]` is rank r's request, or
// nullptr for a rank that joined (join()) and did not submit it. At least one
// entry is non-null. Returns an op Response (sizes and joined_ranks filled per
// core/message.h) or an error Response: kInvalidArgument when a rank's request
// carries its local error ("alltoall 'x': rank 1: splits has ..."), checked
// first; else kMismatch (also for an op other than allreduce/reducescatter/
// barrier meeting a joined rank).
// For a process set other than the global one, by_rank is indexed by rank
// within the set and `global_ranks` (the set's ranks) names them in messages.
Response buildResponse(const std::string& name, const std::vector<const Request*>& by_rank,
                       const std::vector<int>* global_ranks = nullptr);

// An error Response for `names`.
Response errorResponse(std::vector<std::string> names, OpType type, StatusCode code,
                       std::string message);

}  // namespace tutti

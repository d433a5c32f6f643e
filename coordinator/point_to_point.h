#pragma once

// Tagged point-to-point messages (Runtime::send / Runtime::recv), negotiated
// through rank 0 like a collective of two ranks.
//
// Naming. Each rank counts the messages it posts per (process set, sender,
// receiver, tag): the n-th send from rank s to rank d with tag t and the n-th
// recv on d from s with tag t both get the name pointToPointName(s, d, t, n)
// ("p2p 0->1 tag 7 #3", global ranks). The name is the key under which the
// tensor queue and rank 0's controller know the message, so the n-th send
// meets the n-th recv: messages between a pair with one tag never overtake
// each other (MPI's rule), messages with different tags are independent.
// There are no wildcards (any source, any tag).
//
// Matching. A send is a Request of type kSend, a recv one of type kRecv,
// with Request.root = the peer's rank within the set. Rank 0's controller
// waits for the two ranks of the pair only (not the other members of the
// set: they neither submit nor wait), then buildPointToPointResponse checks
// that sender and receiver agree (device, dtype, element count; shapes may
// differ) and decides one kSend Response, or a kMismatch error for both. The
// Response goes to every rank in the one list of responses, and only the two
// ranks execute it, at their place in the list: as for process sets, a total
// order means no two ranks can wait on each other in a cycle.
//
// Stalls and faults are those of the collectives: a recv whose sender never
// sends (or a send never received) is named by the stall inspector after
// TUTTI_STALL_CHECK_TIME_SECONDS and fails with kStalled after
// TUTTI_STALL_SHUTDOWN_TIME_SECONDS; a peer lost during the transfer is
// kPeerLost within TUTTI_TIMEOUT_SECONDS.

#include <cstdint>
#include <string>
#include <vector>

#include "core/message.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tutti {

bool isPointToPoint(OpType type);

// "p2p <src>-><dst> tag <tag> #<seq>" (global ranks).
std::string pointToPointName(int src, int dst, int32_t tag, int64_t seq);

// This rank's checks of a send or recv at enqueue (`what`: "send" or
// "recv"), kInvalidArgument naming the argument and what is accepted:
// the peer (a global rank) is a member of the set other than `rank` (sending
// to oneself is refused, as torch.distributed does), and the tensor is a
// valid CPU view.
Status checkPointToPointPeer(const char* what, int rank, int peer,
                             const std::vector<int>& set_ranks, int32_t process_set);
Status checkPointToPointTensor(const char* what, int peer, const TensorView& tensor);

// Rank 0: the Response for a matched pair. `send` and `recv` are the two
// ranks' requests for `name`; `src` and `dst` their global ranks.
Response buildPointToPointResponse(const std::string& name, const Request& send,
                                   const Request& recv, int src, int dst);

}  // namespace tutti

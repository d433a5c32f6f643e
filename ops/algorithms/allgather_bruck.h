#pragma once

// Allgather of byte blocks whose sizes only their owners know: Bruck's
// concatenation algorithm (J. Bruck, C.-T. Ho, S. Kipnis, E. Upfal and
// D. Weathersby, "Efficient algorithms for all-to-all communications in
// multiport message-passing systems", IEEE TPDS 8(11), 1997). ceil(log2 n)
// rounds for any n: in the round of distance d (1, 2, 4, ...) rank r sends
// the first min(d, n - d) blocks it holds (its own, then r+1's, ...) to
// r - d and receives as many from r + d (mod n). Each round's message starts
// with its length (u64, then per block a u64 length and the bytes), so no
// rank needs to know another's sizes beforehand: the ordered lane
// (coordinator/ordered_lane.h) exchanges its op signatures, and small
// payloads with them, this way.
//
// Threading: runs on the caller's thread, which owns the Transport for the
// call. Blocking: until every round completed or the first transport error
// (kPeerLost passed through). A message whose framing does not parse (a peer
// in another protocol state: a bug) is kInternal naming the peer. Size 1:
// returns {mine} at once.

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

// all->at(p) = rank p's block (all->at(rank) = mine).
Status allgatherBlocksBruck(Transport& transport, std::vector<uint8_t> mine,
                            std::vector<std::vector<uint8_t>>* all);

}  // namespace tutti

#pragma once

// Pairwise alltoallv: n-1 steps; at step k rank r sends its part for rank
// r+k and receives the part from rank r-k (mod n). Zero-byte parts are
// skipped; since rank a's send_bytes[b] equals rank b's recv_bytes[a], both
// sides skip the same messages. The own part is copied locally.
//
// Threading: runs on the caller's thread, which owns the Transport for the
// call. Blocking: returns when every exchange of this rank completed, or with
// the first transport error (kPeerLost/kTimeout passed through).
// Preconditions (checked): both vectors have one entry per rank and
// send_bytes[rank] == recv_bytes[rank]. Consistency across ranks is the
// caller's job (the coordinator negotiates the splits).

#include <cstddef>
#include <vector>

#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

Status alltoallPairwise(Transport& transport, const void* input,
                        const std::vector<size_t>& send_bytes, void* output,
                        const std::vector<size_t>& recv_bytes);

}  // namespace tutti

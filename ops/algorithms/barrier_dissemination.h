#pragma once

// Dissemination barrier: ceil(log2 n) rounds; in round k rank r sends one
// byte to r + 2^k and receives one from r - 2^k (mod n). When it returns on
// any rank, every rank has entered it.
//
// Threading: runs on the caller's thread, which owns the Transport for the
// call. Blocking: until every round completed, or the first transport error
// (kPeerLost/kTimeout passed through). World size 1 returns at once.

#include "core/status.h"
#include "ops/transport.h"

namespace tutti {

Status barrierDissemination(Transport& transport);

}  // namespace tutti

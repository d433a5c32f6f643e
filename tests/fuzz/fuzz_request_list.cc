// Fuzzes deserialize(RequestList): the bytes a worker sends rank 0 on the
// control channel. Property: tests/fuzz/wire_round_trip.h.

#include "tests/fuzz/wire_round_trip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tutti::fuzz::checkWireRoundTrip<tutti::RequestList>(data, size);
  return 0;
}

// Fuzzes deserialize(ResponseList): the bytes rank 0 sends every worker on the
// control channel. Property: tests/fuzz/wire_round_trip.h.

#include "tests/fuzz/wire_round_trip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tutti::fuzz::checkWireRoundTrip<tutti::ResponseList>(data, size);
  return 0;
}

#pragma once

// The property both control-message targets check (core/message.h): any
// input either fails with kInvalidArgument or decodes to a list that
// serializes back to exactly the same bytes (the format has no slack:
// lengths, enums and the trailing fields are all checked).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/message.h"
#include "tests/fuzz/fuzz_check.h"

namespace tutti::fuzz {

template <typename List>
void checkWireRoundTrip(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  List list;
  Status st = deserialize(bytes, &list);
  if (!st.isOk()) {
    FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(serialize(list) == bytes);
}

}  // namespace tutti::fuzz

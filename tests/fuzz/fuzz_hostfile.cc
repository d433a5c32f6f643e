// Fuzzes tuttirun's host parsers (launcher/hosts.h, launcher/discovery.h):
// a hostfile, a -H list, one entry, and a host discovery script's output.
// Input: any text. Checks: errors are kInvalidArgument, parsed hosts are
// non-empty names with slots in [1, 1048576] and no host twice.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "launcher/discovery.h"
#include "launcher/hosts.h"
#include "tests/fuzz/fuzz_check.h"

using namespace tutti;
using launcher::HostSlots;

namespace {

void checkHosts(const Status& st, const std::vector<HostSlots>& hosts) {
  if (!st.isOk()) {
    FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
    return;
  }
  std::set<std::string> seen;
  for (const HostSlots& h : hosts) {
    FUZZ_CHECK(!h.host.empty());
    FUZZ_CHECK(h.slots >= 1);
    FUZZ_CHECK(seen.insert(h.host).second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<HostSlots> hosts;
  checkHosts(launcher::parseHostfile(text, "fuzz.txt", &hosts), hosts);
  hosts.clear();
  checkHosts(launcher::parseHostList(text, &hosts), hosts);
  hosts.clear();
  checkHosts(launcher::parseDiscoveryOutput(text, 2, &hosts), hosts);
  HostSlots one;
  Status st = launcher::parseHostEntry(text, 3, &one);
  FUZZ_CHECK(st.isOk() ? one.slots >= 1 && one.slots <= 1048576 && !one.host.empty()
                       : st.code() == StatusCode::kInvalidArgument);
  return 0;
}

// Fuzzes the readers of settings values (core/settings.h) and of compression
// specs (core/compression_spec.h): the environment of a rank and what
// tuttirun flags write into it. Input: lines "NAME=VALUE" (a NAME without
// the TUTTI_ prefix gets it). Checks: every value is either accepted by its
// spec or rejected with kInvalidArgument naming the variable; loadSettings
// agrees with validateSetting; a canonical compression spec reads back to
// itself.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/compression_spec.h"
#include "core/settings.h"
#include "tests/fuzz/fuzz_check.h"

using namespace tutti;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  size_t at = 0;
  while (at <= text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(at, nl - at);
    at = nl + 1;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string name = line.substr(0, eq);
    const std::string value = line.substr(eq + 1);
    if (name.rfind("TUTTI_", 0) != 0) name = "TUTTI_" + name;
    env[name] = value;
    if (const SettingSpec* spec = findSettingSpec(name)) {
      Status st = validateSetting(*spec, value);
      FUZZ_CHECK(st.isOk() || (st.code() == StatusCode::kInvalidArgument &&
                               st.message().find(name) != std::string::npos));
    }
    std::string canonical;
    if (canonicalizeCompressionSpec(value, &canonical).isOk()) {
      std::string again;
      FUZZ_CHECK(canonicalizeCompressionSpec(canonical, &again).isOk() && again == canonical);
    }
  }
  Settings settings;
  Status st = loadSettings(
      [&](const std::string& name) -> std::optional<std::string> {
        auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      &settings);
  FUZZ_CHECK(st.isOk() || st.code() == StatusCode::kInvalidArgument);
  if (st.isOk()) {
    // Whatever loaded passed its spec.
    for (const auto& [name, value] : env) {
      if (const SettingSpec* spec = findSettingSpec(name)) {
        FUZZ_CHECK(validateSetting(*spec, value).isOk());
      }
    }
  }
  return 0;
}

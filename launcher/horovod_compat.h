#pragma once

// tuttirun --horovod-compat: each rank runs its Python script through
// tutti.horovod_compat (bindings/python/tutti/horovod_compat), which maps
// `import horovod.torch` onto tutti.torch for that process only, and refuses
// to shadow an installed Horovod unless TUTTI_HOROVOD_COMPAT_SHADOW=1
// (docs/horovod.md, "Running an unchanged Horovod script").

#include <string>
#include <vector>

namespace tutti {
namespace launcher {

// Rewrites the job's command `python [interpreter options] script.py args`
// (or `... -m module args`) into `python [options] -m tutti.horovod_compat
// script.py args` (`... -m tutti.horovod_compat -m module args`). The
// program must be a Python interpreter (its file name starts with "python");
// interpreter options that take a value (-W, -X, --check-hash-based-pycs)
// keep it. Returns "" and fills *out, or what was wrong: not a Python
// command, -c, or no script. Pure; thread-safe.
std::string horovodCompatCommand(const std::vector<std::string>& command,
                                 std::vector<std::string>* out);

}  // namespace launcher
}  // namespace tutti

#include "launcher/horovod_compat.h"

namespace tutti {
namespace launcher {
namespace {

const char kModule[] = "tutti.horovod_compat";

std::string baseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool takesValue(const std::string& option) {
  return option == "-W" || option == "-X" || option == "--check-hash-based-pycs";
}

}  // namespace

std::string horovodCompatCommand(const std::vector<std::string>& command,
                                 std::vector<std::string>* out) {
  const std::string accepted =
      "; --horovod-compat runs `python3 [options] script.py args` or `python3 [options] -m "
      "module args`";
  if (command.empty()) return "--horovod-compat: no command" + accepted;
  if (baseName(command[0]).compare(0, 6, "python") != 0) {
    return "--horovod-compat: the command must start with a Python interpreter, got '" +
           command[0] + "'" + accepted;
  }
  size_t i = 1;
  while (i < command.size() && command[i].size() > 1 && command[i][0] == '-' &&
         command[i] != "-m") {
    if (command[i] == "-c" || command[i].compare(0, 2, "-c") == 0) {
      return "--horovod-compat: python -c is not supported" + accepted;
    }
    i += takesValue(command[i]) ? 2 : 1;
  }
  if (i >= command.size()) return "--horovod-compat: no script in the command" + accepted;
  out->assign(command.begin(), command.begin() + static_cast<long>(i));
  out->push_back("-m");
  out->push_back(kModule);
  out->insert(out->end(), command.begin() + static_cast<long>(i), command.end());
  return "";
}

}  // namespace launcher
}  // namespace tutti

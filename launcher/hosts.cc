#include "launcher/hosts.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tutti {
namespace launcher {
namespace {

constexpr int kMaxSlots = 1 << 20;

bool validHostName(const std::string& host) {
  if (host.empty()) return false;
  for (char c : host) {
    // Names, IPv4 and (bracket-free) IPv6 addresses.
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' &&
        c != ':' && c != '%') {
      return false;
    }
  }
  return true;
}

bool parseSlots(const std::string& text, int* slots) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  long v = std::strtol(text.c_str(), nullptr, 10);
  if (v < 1 || v > kMaxSlots) return false;
  *slots = static_cast<int>(v);
  return true;
}

// With `merge_local`, the names of this machine (localhost, 127.0.0.1, its
// host name) are one host: their slots add up under the first one written.
void addHost(std::vector<HostSlots>* hosts, const std::string& host, int slots,
             bool merge_local = false) {
  for (auto& h : *hosts) {
    if (h.host == host || (merge_local && isLocalHost(h.host) && isLocalHost(host))) {
      h.slots += slots;
      return;
    }
  }
  hosts->push_back({host, slots});
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

Status parseHostEntry(const std::string& entry, int default_slots, HostSlots* out) {
  std::string host = entry;
  int slots = default_slots;
  // "host:slots", "[v6addr]:slots", or a bare IPv6 address.
  size_t colon = entry.rfind(':');
  bool bare_ipv6 = entry.find(':') != colon && entry[0] != '[';
  if (bare_ipv6) {
    in6_addr addr;
    if (inet_pton(AF_INET6, entry.c_str(), &addr) != 1) {
      return Status::invalidArgument("bad entry '" + entry +
                                     "': expected host:slots (for example a:2,b:2)");
    }
  } else if (colon != std::string::npos) {
    host = entry.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (!parseSlots(entry.substr(colon + 1), &slots)) {
      return Status::invalidArgument("bad entry '" + entry +
                                     "': expected host:slots with slots an integer in [1, " +
                                     std::to_string(kMaxSlots) + "]");
    }
  }
  if (!validHostName(host)) {
    return Status::invalidArgument("bad entry '" + entry +
                                   "': expected host:slots (for example a:2,b:2)");
  }
  *out = {host, slots};
  return Status::ok();
}

void addHostSlots(std::vector<HostSlots>* hosts, const HostSlots& h) {
  addHost(hosts, h.host, h.slots);
}

Status parseHostList(const std::string& list, std::vector<HostSlots>* out) {
  std::vector<HostSlots> hosts;
  std::stringstream in(list);
  std::string entry;
  if (trim(list).empty()) return Status::invalidArgument("-H: empty host list");
  while (std::getline(in, entry, ',')) {
    entry = trim(entry);
    if (entry.empty()) return Status::invalidArgument("-H: empty entry in '" + list + "'");
    HostSlots h;
    Status st = parseHostEntry(entry, 1, &h);
    if (!st.isOk()) return Status::invalidArgument("-H: " + st.message());
    addHost(&hosts, h.host, h.slots, true);
  }
  if (!list.empty() && list.back() == ',') {
    return Status::invalidArgument("-H: empty entry at the end of '" + list + "'");
  }
  *out = hosts;
  return Status::ok();
}

Status parseHostfile(const std::string& text, const std::string& source,
                     std::vector<HostSlots>* out) {
  std::vector<HostSlots> hosts;
  std::stringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::string content = line.substr(0, line.find('#'));
    std::stringstream words(content);
    std::vector<std::string> tokens;
    std::string word;
    while (words >> word) tokens.push_back(word);
    if (tokens.empty()) continue;
    auto bad = [&](const std::string& why) {
      return Status::invalidArgument(source + ":" + std::to_string(number) + ": " + why +
                                     ", got '" + trim(content) + "'");
    };
    if (tokens.size() > 2) return bad("expected 'host' or 'host slots=N'");
    if (std::count(tokens[0].begin(), tokens[0].end(), ':') == 1) {
      // One colon: the -H form, not an IPv6 address (those have two or more).
      return bad(
          "'host:slots' is the -H form; a hostfile line is 'host' (1 slot) or "
          "'host slots=N'");
    }
    if (!validHostName(tokens[0])) return bad("bad host name");
    int slots = 1;
    if (tokens.size() == 2) {
      const std::string prefix = "slots=";
      if (tokens[1].compare(0, prefix.size(), prefix) != 0) {
        return bad("expected 'host' or 'host slots=N'");
      }
      if (!parseSlots(tokens[1].substr(prefix.size()), &slots)) {
        return bad("slots must be an integer in [1, " + std::to_string(kMaxSlots) + "]");
      }
    }
    addHost(&hosts, tokens[0], slots, true);
  }
  if (hosts.empty()) return Status::invalidArgument(source + ": no hosts in the hostfile");
  *out = hosts;
  return Status::ok();
}

Status readHostfile(const std::string& path, std::vector<HostSlots>* out) {
  std::ifstream in(path);
  if (!in) return Status::invalidArgument("--hostfile " + path + ": cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  return parseHostfile(text.str(), path, out);
}

int totalSlots(const std::vector<HostSlots>& hosts) {
  long total = 0;
  for (const auto& h : hosts) total += h.slots;
  return total > INT_MAX ? INT_MAX : static_cast<int>(total);
}

bool isLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host.compare(0, 4, "127.") == 0;
}

bool isLocalHost(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return false;
  std::string self(name);
  if (host == self) return true;
  // "node1" vs "node1.cluster.example": compare the short names.
  auto shortName = [](const std::string& s) { return s.substr(0, s.find('.')); };
  bool host_is_name = !host.empty() && std::isalpha(static_cast<unsigned char>(host[0]));
  return host_is_name && shortName(host) == shortName(self);
}

}  // namespace launcher
}  // namespace tutti

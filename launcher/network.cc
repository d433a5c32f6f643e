#include "launcher/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <set>

namespace tutti {
namespace launcher {
namespace {

struct Ipv4Interface {
  std::string name;
  std::string address;
  bool loopback;
  bool up;
};

std::vector<Ipv4Interface> ipv4Interfaces() {
  std::vector<Ipv4Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    auto* sin = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
    out.push_back(
        {i->ifa_name, text, (i->ifa_flags & IFF_LOOPBACK) != 0, (i->ifa_flags & IFF_UP) != 0});
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

Status interfaceAddress(const std::string& name, std::string* address) {
  std::set<std::string> names;
  for (const auto& i : ipv4Interfaces()) {
    if (i.name == name) {
      *address = i.address;
      return Status::ok();
    }
    names.insert(i.name);
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return Status::invalidArgument("--network-interface " + name +
                                 ": no such interface with an IPv4 address (there are: " + list +
                                 ")");
}

Status firstNonLoopbackAddress(std::string* address) {
  for (const auto& i : ipv4Interfaces()) {
    if (i.up && !i.loopback) {
      *address = i.address;
      return Status::ok();
    }
  }
  return Status::ioError(
      "this machine has no non-loopback IPv4 address for remote ranks to reach it; name one with "
      "--network-interface");
}

}  // namespace launcher
}  // namespace tutti

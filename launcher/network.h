#pragma once

// Addresses of this machine that ranks on other hosts can reach.

#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {
namespace launcher {

// IPv4 address of interface `name` ("eth0"). kInvalidArgument naming the
// interfaces there are when it has none.
Status interfaceAddress(const std::string& name, std::string* address);

// The first IPv4 address of an interface that is up and not loopback.
Status firstNonLoopbackAddress(std::string* address);

}  // namespace launcher
}  // namespace tutti

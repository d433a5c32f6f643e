#pragma once

// Hosts of a job: `-H a:2,b:2` and hostfiles (`host slots=N`, comments with
// '#'). Pure parsing; errors name the offending entry or line number.

#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {
namespace launcher {

struct HostSlots {
  std::string host;  // name or address as the user wrote it
  int slots = 1;     // processes this host may run
};

// Parses one "host", "host:slots", "[v6addr]:slots" or bare IPv6 address; a
// host without slots gets `default_slots`. Error: "bad entry 'a:x': expected
// host:slots with slots an integer in [1, 1048576]".
Status parseHostEntry(const std::string& entry, int default_slots, HostSlots* out);
// Appends `h`, or adds its slots to the host of the same name already in
// `hosts` (names only: the elastic driver's discovered hosts, which it may
// blacklist one by one, stay apart even when they name this machine).
void addHostSlots(std::vector<HostSlots>* hosts, const HostSlots& h);

// Parses "host[:slots],host[:slots],...". A host without ":slots" has 1 slot.
// A host listed twice gets the sum of its slots, at its first position; so do
// the names of this machine (isLocalHost: localhost, 127.0.0.1, ::1, its host
// name), which are one host for placement: -H localhost:2,127.0.0.1:2 is
// localhost:4 (local ranks 0..3), as in a hostfile.
Status parseHostList(const std::string& list, std::vector<HostSlots>* out);

// Parses the text of a hostfile. Each line is "host" or "host slots=N";
// '#' starts a comment; blank lines are skipped. `source` names the file in
// errors: "hosts.txt:3: expected 'host slots=N', got 'a b c'".
Status parseHostfile(const std::string& text, const std::string& source,
                     std::vector<HostSlots>* out);
// Reads and parses a hostfile from disk.
Status readHostfile(const std::string& path, std::vector<HostSlots>* out);

// Total slots of all hosts.
int totalSlots(const std::vector<HostSlots>& hosts);

// True if `host` names this machine: localhost, 127.0.0.1, ::1, or this
// machine's host name (short or fully qualified).
bool isLocalHost(const std::string& host);
// True if `host` is a loopback address (127.0.0.0/8, ::1, localhost): a rank
// there reaches this machine's servers at 127.0.0.1.
bool isLoopbackHost(const std::string& host);

}  // namespace launcher
}  // namespace tutti

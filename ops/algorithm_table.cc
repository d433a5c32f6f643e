#include "ops/algorithm_table.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "ops/algorithms/broadcast_binomial.h"

namespace tutti {
namespace {

constexpr uint64_t kKiB = 1024;

// Recursive doubling keeps a whole-buffer scratch and sends the whole buffer
// in each of its log2 n rounds: past this the ring is always the better one.
constexpr uint64_t kRecursiveDoublingMaxBytes = 64 * kKiB * kKiB;

const char* fitsAll(const AlgorithmCase&) {
  return nullptr;
}

const char* recursiveDoublingDeclines(const AlgorithmCase& c) {
  return c.bytes > kRecursiveDoublingMaxBytes
             ? "above 64 MiB (it sends the whole buffer every round and keeps a copy)"
             : nullptr;
}

const char* hierarchicalDeclines(const AlgorithmCase& c) {
  if (!c.hierarchical_allowed) {
    if (c.collective == "allgather") return "turned off (TUTTI_HIERARCHICAL_ALLGATHER=0)";
    if (c.collective == "allreduce") return "turned off (TUTTI_HIERARCHICAL_ALLREDUCE=0)";
    return "turned off";
  }
  if (c.cross_size < 2) return "all ranks are on one host";
  if (c.local_size == 0) return "hosts hold different numbers of ranks";
  if (c.local_size < 2) return "one rank per host";
  return nullptr;
}

// Whether comma-separated `list` has `item` (no allocation: on every op's path).
bool listHas(std::string_view list, std::string_view item) {
  while (true) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == item) return true;
    if (comma == std::string_view::npos) return false;
    list.remove_prefix(comma + 1);
  }
}

bool inRange(uint64_t v, uint64_t lo, uint64_t hi) {
  return lo <= v && v <= hi;
}

std::string bytesText(uint64_t v) {
  if (v == kNoByteLimit) return "inf";
  if (v != 0 && v % (kKiB * kKiB) == 0) return std::to_string(v / (kKiB * kKiB)) + "m";
  if (v != 0 && v % kKiB == 0) return std::to_string(v / kKiB) + "k";
  return std::to_string(v);
}

// "4k" -> 4096; false when not a byte count.
bool parseBytes(const std::string& text, uint64_t* out) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  const std::string suffix(end);
  uint64_t scale = 1;
  if (suffix == "k" || suffix == "K")
    scale = kKiB;
  else if (suffix == "m" || suffix == "M")
    scale = kKiB * kKiB;
  else if (suffix == "g" || suffix == "G")
    scale = kKiB * kKiB * kKiB;
  else if (!suffix.empty())
    return false;
  if (v > kNoByteLimit / scale) return false;
  *out = v * scale;
  return true;
}

std::string acceptedCollectives() {
  std::string out;
  for (const AlgorithmEntry& e : algorithmTable()) {
    if (!listHas(out, e.collective)) out += (out.empty() ? "" : ",") + std::string(e.collective);
  }
  return out;
}

std::string acceptedNames(const std::string& collective) {
  std::string out;
  for (const AlgorithmEntry& e : algorithmTable()) {
    if (collective == e.collective) out += (out.empty() ? "" : ", ") + std::string(e.name);
  }
  return out;
}

Status badEntry(const std::string& entry, const std::string& why) {
  return Status::invalidArgument(
      "TUTTI_ALGORITHMS entry '" + entry + "': " + why +
      " (expected COLLECTIVE:LO-HI:NAME, e.g. allreduce:0-4k:recursive_doubling; LO and HI in "
      "bytes with an optional k/m/g suffix, HI empty or inf for no limit; collectives: " +
      acceptedCollectives() + ")");
}

Status parseEntry(const std::string& entry, AlgorithmOverride* out) {
  const size_t c1 = entry.find(':');
  const size_t c2 = c1 == std::string::npos ? c1 : entry.find(':', c1 + 1);
  if (c2 == std::string::npos || entry.find(':', c2 + 1) != std::string::npos) {
    return badEntry(entry, "not three fields separated by ':'");
  }
  out->collective = entry.substr(0, c1);
  const std::string range = entry.substr(c1 + 1, c2 - c1 - 1);
  const std::string name = entry.substr(c2 + 1);
  if (acceptedNames(out->collective).empty()) {
    return badEntry(entry, "unknown collective '" + out->collective + "'");
  }
  const size_t dash = range.find('-');
  const std::string hi = dash == std::string::npos ? "" : range.substr(dash + 1);
  if (dash == std::string::npos || !parseBytes(range.substr(0, dash), &out->min_bytes) ||
      !(hi.empty() || hi == "inf" || parseBytes(hi, &out->max_bytes)) ||
      out->max_bytes < out->min_bytes) {
    return badEntry(entry, "bad byte range '" + range + "'");
  }
  if (hi.empty() || hi == "inf") out->max_bytes = kNoByteLimit;
  for (const AlgorithmEntry& e : algorithmTable()) {
    if (out->collective == e.collective && name == e.name) {
      out->entry = &e;
      return Status::ok();
    }
  }
  return badEntry(entry, "unknown " + out->collective + " algorithm '" + name +
                             "'; accepted: " + acceptedNames(out->collective));
}

// "" when `e` can run `c`, else why not.
std::string declineReason(const AlgorithmEntry& e, const AlgorithmCase& c) {
  if (!listHas(e.transports, c.transport)) {
    return std::string("runs over ") + e.transports + ", not " + std::string(c.transport);
  }
  const char* why = e.declines(c);
  return why == nullptr ? "" : why;
}

}  // namespace

const std::vector<AlgorithmEntry>& algorithmTable() {
  static const std::vector<AlgorithmEntry> table = {
      {"allreduce", "recursive_doubling", AlgorithmId::kAllreduceRecursiveDoubling, 0, 64 * kKiB,
       "tcp", recursiveDoublingDeclines, "log2 n whole-buffer exchanges (latency bound)"},
      {"allreduce", "hierarchical", AlgorithmId::kAllreduceHierarchical, 0, kNoByteLimit, "tcp",
       hierarchicalDeclines,
       "ring reduce-scatter within each host, allreduce of each rank's block across hosts, ring "
       "allgather within each host, pipelined in 4 MiB chunks (several ranks on each of several "
       "hosts, as many on each)"},
      {"allreduce", "ring", AlgorithmId::kAllreduceRing, 0, kNoByteLimit, "tcp", fitsAll,
       "pipelined ring reduce-scatter + allgather (bandwidth bound)"},
      {"broadcast", "hierarchical", AlgorithmId::kBroadcastHierarchical, 0, kNoByteLimit, "tcp",
       hierarchicalDeclines,
       "across hosts among the ranks at the root's local index, then within each host, each a "
       "binomial tree up to 64 KiB and a chain above, pipelined in 4 MiB pieces (several ranks on "
       "each of several hosts, as many on each)"},
      {"broadcast", "binomial", AlgorithmId::kBroadcastBinomial, 0, kBinomialBroadcastMaxBytes,
       "tcp", fitsAll, "binomial tree, ceil(log2 n) rounds of whole-buffer messages"},
      {"broadcast", "chain", AlgorithmId::kBroadcastChain, 0, kNoByteLimit, "tcp", fitsAll,
       "pipelined chain from the root"},
      {"allgather", "hierarchical", AlgorithmId::kAllgatherHierarchical, 64 * kKiB + 1,
       kNoByteLimit, "tcp", hierarchicalDeclines,
       "allgather across hosts of each local index's blocks, then a ring allgather within each "
       "host, pipelined in 4 MiB chunks (several ranks on each of several hosts, as many on each)"},
      {"allgather", "ring", AlgorithmId::kAllgatherRing, 0, kNoByteLimit, "tcp", fitsAll,
       "pipelined ring, uneven blocks"},
      {"alltoall", "pairwise", AlgorithmId::kAlltoallPairwise, 0, kNoByteLimit, "tcp", fitsAll,
       "n-1 pairwise exchange rounds"},
      {"reducescatter", "ring", AlgorithmId::kReducescatterRing, 0, kNoByteLimit, "tcp", fitsAll,
       "pipelined ring, uneven blocks"},
      {"barrier", "dissemination", AlgorithmId::kBarrierDissemination, 0, kNoByteLimit, "tcp",
       fitsAll, "ceil(log2 n) rounds of 1-byte tokens"},
  };
  return table;
}

Status parseAlgorithmOverrides(const std::string& text, std::vector<AlgorithmOverride>* out) {
  out->clear();
  if (text.empty()) return Status::ok();
  std::stringstream in(text);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    AlgorithmOverride o;
    TUTTI_RETURN_IF_ERROR(parseEntry(entry, &o));
    out->push_back(o);
  }
  if (text.back() == ',') return badEntry("", "empty entry after the last ','");
  return Status::ok();
}

AlgorithmChoice selectAlgorithm(const std::vector<AlgorithmEntry>& table,
                                const std::vector<AlgorithmOverride>& overrides,
                                const AlgorithmCase& c) {
  std::vector<const AlgorithmEntry*> candidates;
  for (const AlgorithmOverride& o : overrides) {
    if (o.collective == c.collective && inRange(c.bytes, o.min_bytes, o.max_bytes)) {
      candidates.push_back(o.entry);
    }
  }
  for (const AlgorithmEntry& e : table) {
    if (c.collective == e.collective && inRange(c.bytes, e.min_bytes, e.max_bytes)) {
      candidates.push_back(&e);
    }
  }
  AlgorithmChoice choice;
  for (const AlgorithmEntry* e : candidates) {
    const std::string why = declineReason(*e, c);
    if (why.empty()) {
      choice.entry = e;
      return choice;
    }
    choice.declined.push_back(std::string(e->name) + ": " + why);
  }
  return choice;
}

std::string algorithmTableText() {
  std::ostringstream out;
  for (const AlgorithmEntry& e : algorithmTable()) {
    out << "  " << e.collective << ":" << bytesText(e.min_bytes) << "-" << bytesText(e.max_bytes)
        << ":" << e.name << "  [" << e.transports << "] " << e.summary << "\n";
  }
  return out.str();
}

}  // namespace tutti

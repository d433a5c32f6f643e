#pragma once

// Which algorithm runs a collective, as data (after UCC's score maps,
// ucc/src/coll_score): a table of every collective's algorithms with the
// payload sizes they are chosen for by default and the transports they run
// over, plus an override, TUTTI_ALGORITHMS, that puts other choices first.
//
// Selection is pure (no I/O, no state) and deterministic in its arguments,
// so ranks with the same setting and the same op choose the same algorithm.
// Candidates are tried in order: the override entries whose collective and
// byte range match the case (in the order written), then the table's entries
// whose default range matches (in table order). A candidate that does not fit
// the case (wrong transport, or its own limit) says why and the next one is
// taken; every collective has a last entry that fits every case.
//
// TUTTI_ALGORITHMS syntax: comma-separated entries COLLECTIVE:LO-HI:NAME,
// e.g. "allreduce:0-4k:recursive_doubling,broadcast:0-64k:binomial". LO and HI
// are byte counts, inclusive, with an optional k/m/g suffix (x1024, x1024^2,
// x1024^3); HI may be empty or "inf" for no upper bound. The same value must
// be set on every rank (tuttirun passes it to all).
//
// Thread-safety: everything here is immutable or pure; any thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tutti {

enum class AlgorithmId {
  kAllreduceRecursiveDoubling,
  kAllreduceRing,
  kAllreduceHierarchical,
  kBroadcastBinomial,
  kBroadcastChain,
  kBroadcastHierarchical,
  kAllgatherRing,
  kAllgatherHierarchical,
  kAlltoallPairwise,
  kReducescatterRing,
  kBarrierDissemination,
};

// What one collective call asks for.
// Views: the caller keeps the strings alive for the selectAlgorithm call.
struct AlgorithmCase {
  std::string_view collective;  // "allreduce", "broadcast", ... (AlgorithmEntry::collective)
  uint64_t bytes = 0;           // payload in bytes (allreduce: count x element size)
  std::string_view transport;   // what the backend runs over: "tcp" (sockets, shm, subsets)
  // Placement of the transport's ranks (ops/host_groups.h): ranks per host
  // (0 when hosts hold different numbers of ranks) and hosts. The same on
  // every rank, so the choice is too.
  int local_size = 1;
  int cross_size = 1;
  // false: TUTTI_HIERARCHICAL_ALLREDUCE=0 (allreduce), _ALLGATHER=0
  // (allgather); broadcast has no such switch (TUTTI_ALGORITHMS decides).
  bool hierarchical_allowed = true;
};

struct AlgorithmEntry {
  const char* collective;
  const char* name;  // as written in TUTTI_ALGORITHMS
  AlgorithmId id;
  uint64_t min_bytes;  // default byte range, inclusive
  uint64_t max_bytes;
  const char* transports;  // comma-separated transports it runs over
  // nullptr when the algorithm can run `c`, else the reason it cannot.
  const char* (*declines)(const AlgorithmCase& c);
  const char* summary;
};

// Upper bound meaning "no limit".
constexpr uint64_t kNoByteLimit = UINT64_MAX;

// Every algorithm of the tcp backend, grouped by collective, preferred first.
const std::vector<AlgorithmEntry>& algorithmTable();

struct AlgorithmOverride {
  std::string collective;
  uint64_t min_bytes = 0;
  uint64_t max_bytes = kNoByteLimit;
  const AlgorithmEntry* entry = nullptr;  // in algorithmTable()
};

// Parses TUTTI_ALGORITHMS ("" = no overrides). Errors (kInvalidArgument) name
// the bad entry and list what is accepted: the syntax, the collectives, and
// the algorithm names of the entry's collective.
Status parseAlgorithmOverrides(const std::string& text, std::vector<AlgorithmOverride>* out);

struct AlgorithmChoice {
  const AlgorithmEntry* entry = nullptr;  // null only if no candidate fits
  std::vector<std::string> declined;      // "name: reason" of candidates passed over
};

// The algorithm for `c`: see the order at the top of this file.
AlgorithmChoice selectAlgorithm(const std::vector<AlgorithmEntry>& table,
                                const std::vector<AlgorithmOverride>& overrides,
                                const AlgorithmCase& c);

// The table as text, one algorithm a line (tuttirun --check-build).
std::string algorithmTableText();

}  // namespace tutti

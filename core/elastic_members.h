#pragma once

// The vocabulary of elastic training's store protocol (docs/elastic.md),
// shared by tuttirun's driver (launcher/elastic_*) and the worker
// (rendezvous/elastic_membership.h):
//
//   elastic/gen/<g>/members   driver: one line per member, in rank order:
//                             "<worker_id> <rank> <size> <local_rank>
//                              <local_size> <cross_rank> <cross_size> <host>"
//   elastic/latest            driver: "<g>", set only after its members key
//   elastic/failed            driver: why the job gave up
//   elastic/report/<g>/<id>   worker <id>: "<rank>" it saw lost in generation g
//   elastic/gen/<g>/...       the rendezvous of generation g
//
// Pure functions: no I/O. Thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tutti {

// One line of elastic/gen/<g>/members.
struct ElasticMember {
  int worker_id = -1;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string host;
  bool operator==(const ElasticMember& o) const;
};

namespace elastic_keys {
std::string latest();                                   // "elastic/latest"
std::string failed();                                   // "elastic/failed"
std::string generationPrefix(int64_t generation);       // "elastic/gen/<g>/"
std::string members(int64_t generation);                // "elastic/gen/<g>/members"
std::string rankAddress(int64_t generation, int rank);  // "elastic/gen/<g>/rank/<r>/addr"
std::string report(int64_t generation, int worker_id);  // "elastic/report/<g>/<id>"
std::string reportPrefix();                             // "elastic/report/"
// Parses "elastic/report/<g>/<worker_id>"; false for any other key.
bool parseReport(const std::string& key, int64_t* generation, int* worker_id);
// Parses a report's value "<rank>" (whitespace around it allowed).
bool parseReportValue(const std::string& value, int* rank);
}  // namespace elastic_keys

// Text of the members key: one line per member, each ending in '\n'.
std::string formatMembers(const std::vector<ElasticMember>& members);

// Parses and checks a members text: 8 fields per line, line i has rank i,
// every size equals the number of lines, local/cross ranks below their sizes,
// worker ids >= 0 and unique, a host without blanks. Empty lines are ignored;
// no member at all is an error. kInvalidArgument naming the line and field.
Status parseMembers(const std::string& text, std::vector<ElasticMember>* out);

// Parses a generation number ("<g>", g >= 0). kInvalidArgument otherwise.
Status parseGeneration(const std::string& text, int64_t* generation);

// The member with `worker_id`, or nullptr.
const ElasticMember* findMember(const std::vector<ElasticMember>& members, int worker_id);

}  // namespace tutti

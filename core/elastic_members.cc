#include "core/elastic_members.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <set>
#include <sstream>

#include "core/store.h"

namespace tutti {

bool ElasticMember::operator==(const ElasticMember& o) const {
  return worker_id == o.worker_id && rank == o.rank && size == o.size &&
         local_rank == o.local_rank && local_size == o.local_size && cross_rank == o.cross_rank &&
         cross_size == o.cross_size && host == o.host;
}

namespace elastic_keys {
std::string latest() {
  return "elastic/latest";
}
std::string failed() {
  return "elastic/failed";
}
std::string generationPrefix(int64_t generation) {
  return "elastic/gen/" + std::to_string(generation) + "/";
}
std::string members(int64_t generation) {
  return generationPrefix(generation) + "members";
}
std::string rankAddress(int64_t generation, int rank) {
  return generationPrefix(generation) + rankAddressKey(rank);
}
std::string reportPrefix() {
  return "elastic/report/";
}
std::string report(int64_t generation, int worker_id) {
  return reportPrefix() + std::to_string(generation) + "/" + std::to_string(worker_id);
}
}  // namespace elastic_keys

namespace {

constexpr long long kMaxCount = 1 << 20;  // as TUTTI_SIZE's range

// A decimal integer in [0, max]; false otherwise.
bool parseCount(const std::string& text, long long max, long long* out) {
  if (text.empty() || text.size() > 19) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  errno = 0;
  long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno != 0 || v > max) return false;
  *out = v;
  return true;
}

}  // namespace

std::string formatMembers(const std::vector<ElasticMember>& members) {
  std::ostringstream out;
  for (const ElasticMember& m : members) {
    out << m.worker_id << ' ' << m.rank << ' ' << m.size << ' ' << m.local_rank << ' '
        << m.local_size << ' ' << m.cross_rank << ' ' << m.cross_size << ' ' << m.host << '\n';
  }
  return out.str();
}

Status parseMembers(const std::string& text, std::vector<ElasticMember>* out) {
  static const char* const kFields[] = {"worker_id",  "rank",       "size",       "local_rank",
                                        "local_size", "cross_rank", "cross_size", "host"};
  std::vector<ElasticMember> members;
  std::istringstream lines(text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    if (fields.empty()) continue;
    const std::string where = "elastic members line " + std::to_string(line_no) + " '" + line + "'";
    if (fields.size() != 8) {
      return Status::invalidArgument(where +
                                     ": expected 8 fields (worker_id rank size local_rank "
                                     "local_size cross_rank cross_size host), got " +
                                     std::to_string(fields.size()));
    }
    long long v[7];
    for (int i = 0; i < 7; ++i) {
      if (!parseCount(fields[i], kMaxCount, &v[i])) {
        return Status::invalidArgument(where + ": " + kFields[i] + " '" + fields[i] +
                                       "' is not an integer in [0, " + std::to_string(kMaxCount) +
                                       "]");
      }
    }
    ElasticMember m;
    m.worker_id = static_cast<int>(v[0]);
    m.rank = static_cast<int>(v[1]);
    m.size = static_cast<int>(v[2]);
    m.local_rank = static_cast<int>(v[3]);
    m.local_size = static_cast<int>(v[4]);
    m.cross_rank = static_cast<int>(v[5]);
    m.cross_size = static_cast<int>(v[6]);
    m.host = fields[7];
    if (m.rank != static_cast<int>(members.size())) {
      return Status::invalidArgument(where + ": rank " + std::to_string(m.rank) + " vs " +
                                     std::to_string(members.size()) +
                                     " expected (members are listed in rank order)");
    }
    if (m.local_rank >= m.local_size || m.cross_rank >= m.cross_size) {
      return Status::invalidArgument(where +
                                     ": local_rank/cross_rank must be below local_size/cross_size");
    }
    members.push_back(std::move(m));
  }
  if (members.empty()) {
    return Status::invalidArgument("elastic members: no member listed");
  }
  std::set<int> ids;
  for (const ElasticMember& m : members) {
    if (m.size != static_cast<int>(members.size())) {
      return Status::invalidArgument("elastic members: rank " + std::to_string(m.rank) +
                                     " says size " + std::to_string(m.size) + " vs " +
                                     std::to_string(members.size()) + " lines");
    }
    if (!ids.insert(m.worker_id).second) {
      return Status::invalidArgument("elastic members: worker id " + std::to_string(m.worker_id) +
                                     " is listed twice");
    }
  }
  *out = std::move(members);
  return Status::ok();
}

Status parseGeneration(const std::string& text, int64_t* generation) {
  long long g = 0;
  if (!parseCount(text, INT64_MAX, &g)) {
    return Status::invalidArgument("elastic generation '" + text +
                                   "': expected a non-negative integer");
  }
  *generation = g;
  return Status::ok();
}

bool elastic_keys::parseReport(const std::string& key, int64_t* generation, int* worker_id) {
  const std::string prefix = reportPrefix();
  if (key.compare(0, prefix.size(), prefix) != 0) return false;
  size_t slash = key.find('/', prefix.size());
  if (slash == std::string::npos) return false;
  long long g = 0, id = 0;
  if (!parseCount(key.substr(prefix.size(), slash - prefix.size()), INT64_MAX, &g) ||
      !parseCount(key.substr(slash + 1), kMaxCount, &id)) {
    return false;
  }
  *generation = g;
  *worker_id = static_cast<int>(id);
  return true;
}

bool elastic_keys::parseReportValue(const std::string& value, int* rank) {
  const size_t b = value.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return false;
  const size_t e = value.find_last_not_of(" \t\r\n");
  long long r = 0;
  if (!parseCount(value.substr(b, e - b + 1), INT_MAX, &r)) return false;
  *rank = static_cast<int>(r);
  return true;
}

const ElasticMember* findMember(const std::vector<ElasticMember>& members, int worker_id) {
  for (const ElasticMember& m : members) {
    if (m.worker_id == worker_id) return &m;
  }
  return nullptr;
}

}  // namespace tutti

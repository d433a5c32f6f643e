// Fuzzes the readers of the elastic store's text values (core/elastic_members.h):
// the members of a generation, the generation number, a worker's report key
// and value. Input: any text. Checks: errors are kInvalidArgument; parsed
// members satisfy the documented invariants and format back to a text that
// parses to the same members.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/elastic_members.h"
#include "tests/fuzz/fuzz_check.h"

using namespace tutti;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<ElasticMember> members;
  Status st = parseMembers(text, &members);
  if (!st.isOk()) {
    FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
  } else {
    FUZZ_CHECK(!members.empty());
    std::set<int> ids;
    const int n = static_cast<int>(members.size());
    for (int i = 0; i < n; ++i) {
      const ElasticMember& m = members[i];
      FUZZ_CHECK(m.rank == i && m.size == n && m.worker_id >= 0);
      FUZZ_CHECK(m.local_rank >= 0 && m.local_rank < m.local_size);
      FUZZ_CHECK(m.cross_rank >= 0 && m.cross_rank < m.cross_size);
      FUZZ_CHECK(ids.insert(m.worker_id).second);
      FUZZ_CHECK(findMember(members, m.worker_id) == &members[i]);
    }
    std::vector<ElasticMember> again;
    FUZZ_CHECK(parseMembers(formatMembers(members), &again).isOk() && again == members);
  }
  int64_t generation = -1;
  st = parseGeneration(text, &generation);
  FUZZ_CHECK(st.isOk() ? generation >= 0 : st.code() == StatusCode::kInvalidArgument);
  if (st.isOk()) {
    int64_t again = -1;
    FUZZ_CHECK(parseGeneration(std::to_string(generation), &again).isOk() && again == generation);
  }
  int worker = -1, rank = -1;
  if (elastic_keys::parseReport(text, &generation, &worker)) {
    FUZZ_CHECK(elastic_keys::report(generation, worker) == text || generation >= 0);
  }
  elastic_keys::parseReportValue(text, &rank);
  return 0;
}

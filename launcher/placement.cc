#include "launcher/placement.h"

#include <algorithm>

namespace tutti {
namespace launcher {

Status assignRanks(const std::vector<HostSlots>& hosts, int np, std::vector<RankPlacement>* out) {
  if (np < 1) {
    return Status::invalidArgument("-np " + std::to_string(np) + ": expected at least 1 rank");
  }
  if (hosts.empty()) return Status::invalidArgument("no hosts to run on");
  int slots = totalSlots(hosts);
  if (slots < np) {
    std::string list;
    for (const auto& h : hosts) {
      list += (list.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
    }
    return Status::invalidArgument("-np " + std::to_string(np) + " but the hosts have only " +
                                   std::to_string(slots) + " slots (" + list + ")");
  }
  std::vector<RankPlacement> ranks;
  int host_index = 0;
  for (const auto& h : hosts) {
    int here = std::min(h.slots, np - static_cast<int>(ranks.size()));
    if (here <= 0) break;
    for (int i = 0; i < here; ++i) {
      RankPlacement p;
      p.rank = static_cast<int>(ranks.size());
      p.host = h.host;
      p.host_index = host_index;
      p.local_rank = i;
      p.local_size = here;
      p.cross_rank = host_index;
      ranks.push_back(p);
    }
    ++host_index;
  }
  for (auto& p : ranks) p.cross_size = host_index;
  *out = ranks;
  return Status::ok();
}

}  // namespace launcher
}  // namespace tutti

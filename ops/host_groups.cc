#include "ops/host_groups.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>

#include "core/check.h"
#include "ops/algorithms/allgather_ring.h"

namespace tutti {

HostLayout hostLayout(const std::vector<int>& host_of_rank, int rank) {
  TUTTI_CHECK_LT(rank, static_cast<int>(host_of_rank.size()));
  // Host id -> its ranks, ascending (ranks are visited in order).
  std::map<int, std::vector<int>> hosts;
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    hosts[host_of_rank[r]].push_back(static_cast<int>(r));
  }
  HostLayout out;
  out.cross_size = static_cast<int>(hosts.size());
  for (const auto& host : hosts) {
    out.host_order.insert(out.host_order.end(), host.second.begin(), host.second.end());
  }
  out.local_ranks = hosts[host_of_rank[static_cast<size_t>(rank)]];
  out.local_size = static_cast<int>(out.local_ranks.size());
  for (const auto& host : hosts) {
    if (host.second.size() != out.local_ranks.size()) out.local_size = 0;
  }
  if (out.local_size == 0) return out;
  const auto mine = std::find(out.local_ranks.begin(), out.local_ranks.end(), rank);
  const size_t local_index = static_cast<size_t>(mine - out.local_ranks.begin());
  for (const auto& host : hosts) {
    out.cross_ranks.push_back(host.second[local_index]);
    out.grid.push_back(host.second);
  }
  return out;
}

Status exchangeHostIds(Transport& transport, int host_id, std::vector<int>* host_of_rank) {
  const int n = transport.size();
  std::vector<int32_t> ids(static_cast<size_t>(n), 0);
  const int32_t mine = host_id;
  TUTTI_RETURN_IF_ERROR(allgatherRing(transport, &mine, ids.data(),
                                      std::vector<size_t>(ids.size(), sizeof(int32_t)), 0));
  host_of_rank->assign(ids.begin(), ids.end());
  return Status::ok();
}

std::vector<int> hostIdsOf(const std::vector<int>& host_of_rank, const std::vector<int>& ranks) {
  std::vector<int> out;
  if (host_of_rank.empty()) return out;
  for (int r : ranks) out.push_back(host_of_rank[static_cast<size_t>(r)]);
  return out;
}

HostGroups::HostGroups(Transport& transport, const std::vector<int>& host_of_rank)
    : transport_(transport) {
  const std::vector<int> ids = host_of_rank.empty()
                                   ? std::vector<int>(static_cast<size_t>(transport.size()), 0)
                                   : host_of_rank;
  TUTTI_CHECK_EQ(ids.size(), static_cast<size_t>(transport.size()));
  layout_ = hostLayout(ids, transport.rank());
  host_ordered_rank_.assign(ids.size(), 0);
  for (size_t i = 0; i < layout_.host_order.size(); ++i) {
    host_ordered_rank_[static_cast<size_t>(layout_.host_order[i])] = static_cast<int>(i);
  }
  if (!std::is_sorted(layout_.host_order.begin(), layout_.host_order.end())) {
    host_ordered_ = std::make_unique<SubsetTransport>(transport, layout_.host_order);
  }
  if (layout_.local_size > 1 && layout_.cross_size > 1) {
    local_ = std::make_unique<SubsetTransport>(transport, layout_.local_ranks);
    cross_ = std::make_unique<SubsetTransport>(transport, layout_.cross_ranks);
  }
}

}  // namespace tutti

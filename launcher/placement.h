#pragma once

// Placement: which rank runs on which host. Ranks fill the hosts in the order
// given, each host up to its slots; hosts that get no rank are not part of the
// job. Pure function; see tests/launcher/placement_test.cc.

#include <string>
#include <vector>

#include "core/status.h"
#include "launcher/hosts.h"

namespace tutti {
namespace launcher {

struct RankPlacement {
  int rank = 0;
  std::string host;    // as given in -H / the hostfile
  int host_index = 0;  // index of the host among the hosts of the job (= cross rank)
  int local_rank = 0;  // index among the ranks of this host
  int local_size = 1;  // ranks on this host
  int cross_rank = 0;  // TUTTI_CROSS_RANK: index of this host among the job's hosts
  int cross_size = 1;  // TUTTI_CROSS_SIZE: number of hosts that run a rank
};

// Assigns `np` ranks to `hosts`. kInvalidArgument if np < 1 or the hosts have
// fewer slots than np ("-np 5 but the hosts have 4 slots (a:2,b:2)").
Status assignRanks(const std::vector<HostSlots>& hosts, int np, std::vector<RankPlacement>* out);

}  // namespace launcher
}  // namespace tutti

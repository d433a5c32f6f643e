#pragma once

// An elastic tuttirun job (docs/elastic.md): the ElasticDriver
// (launcher/elastic_driver.h) wired to the Job's event loop (workers start,
// stop and exit there), the rendezvous server (generations are published
// there, lost-rank reports read from it every tick) and host discovery
// (launcher/discovery.h, polled every second on its own thread).
//
// Threading: runs on the calling thread (the Job's event loop); only the
// discovery poller has a thread of its own.

#include <vector>

#include "launcher/cli.h"
#include "launcher/hosts.h"
#include "launcher/launch.h"
#include "launcher/rank_env.h"
#include "rendezvous/rendezvous_server.h"

namespace tutti {
namespace launcher {

// Runs the job until it ends; returns tuttirun's exit code. `hosts`: the
// first list (the discovery script's first run, or -H / --hostfile).
int runElasticJob(const LaunchOptions& options, const JobEnv& job_env, const StartOptions& start,
                  const std::vector<HostSlots>& hosts, RendezvousServer& server);

}  // namespace launcher
}  // namespace tutti

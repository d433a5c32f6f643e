#pragma once

// The checks of tuttirun's command line after CLI11 has parsed it
// (launcher/cli.cc calls them in this order). Each returns "" when the
// options are fine, else the message for the user (without "tuttirun: "),
// naming the flag, the value and what is accepted. `app` is the parsed
// command line, asked only which flags were given.

#include <CLI/CLI.hpp>
#include <string>

#include "launcher/cli.h"
#include "launcher/rank_env.h"

namespace tutti {
namespace launcher {

// --mpi against this build, and the mpi backend (--backend, else TUTTI_BACKEND
// in `env`) against --mpi.
std::string checkMpiOptions(const LaunchOptions& o, const EnvMap& env);

// -np, -H / --hostfile (or an allocation in `env`), --start-timeout, -p, -x.
std::string checkJobOptions(const CLI::App& app, const LaunchOptions& o, const EnvMap& env);

// The elastic flags (--min-np, --max-np, --slots-per-host, --elastic-timeout,
// --reset-limit, --blacklist-cooldown-range, --host-discovery-script) and how
// they combine with the rest.
std::string checkElasticOptions(const CLI::App& app, const LaunchOptions& o);

// --rsh-agent: split into options->rsh_agent_words, and what it excludes.
std::string checkRshAgent(const CLI::App& app, LaunchOptions* options);

}  // namespace launcher
}  // namespace tutti

// tuttirun: parses the command line (launcher/cli.h) against its environment
// and runs the job (launcher/run_job.h, or launcher/mpi_launch.h with --mpi).
// The only place of the launcher where exceptions may surface (CLI11,
// std::bad_alloc).

#include <exception>
#include <iostream>

#include "launcher/cli.h"
#include "launcher/mpi_launch.h"
#include "launcher/rank_env.h"
#include "launcher/run_job.h"
#include "launcher/spawn.h"

int main(int argc, char** argv) {
  using namespace tutti::launcher;
  // Before any thread exists: the event loop takes these through a signalfd.
  blockJobSignals();
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    LaunchOptions options;
    CliOutcome outcome = parseCommandLine(args, currentEnvironment(), &options);
    if (!outcome.run) {
      std::cout << outcome.out << std::flush;
      std::cerr << outcome.err << std::flush;
      return outcome.exit_code;
    }
    if (options.mpi) return runWithMpirun(options);
    return runJob(options);
  } catch (const std::exception& e) {
    std::cerr << "tuttirun: internal error: " << e.what() << std::endl;
    return kExitStartFailed;
  }
}

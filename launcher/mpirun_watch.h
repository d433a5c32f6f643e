#pragma once

// tuttirun --mpi runs mpirun as its child (no longer in its place) to bound
// two hangs of Open MPI's mpirun, read from the ranks' notices in its stderr
// (core/mpi_exit_notices.h; every byte is passed through unchanged):
//  - mpirun can stay for good after every rank left, when its runtime is
//    stuck (seen after garbage and an idle connection on its PMIx port: the
//    ranks hang in MPI_Finalize, and mpirun never reaps them). The ranks bound
//    MPI_Finalize themselves and each prints a notice when it leaves without
//    it; once every rank of the job did and mpirun is still running
//    `exit_wait_seconds` later, tuttirun stops it. Its exit code is then the
//    ranks' own (the first non-zero exit status they reported, else 0): their
//    work was done.
//  - an MPI wait that timed out ends the job with MPI_Abort (its error says
//    so); mpirun can then wait for good for a host it cannot reach (seen
//    with a cut link). One second after the MPI_Abort that error announced
//    was due, a mpirun still running is stopped; exit code 1
//    (kExitRankFailed).
// Stopping is SIGTERM, then SIGKILL `grace_seconds` later.
//
// Otherwise mpirun's: its exit code, or 128+N when a signal N killed it.
// stdin and stdout are mpirun's directly (mpirun forwards stdin to rank 0);
// SIGINT, SIGTERM and SIGHUP sent to tuttirun are passed on to mpirun (a
// terminal's Ctrl-C reaches both, as they share the process group, and is not
// passed on twice). mpirun gets SIGTERM when tuttirun dies.

#include <string>
#include <vector>

namespace tutti {
namespace launcher {

// Counts the finalize notices in a byte stream (mpirun's stderr).
class FinalizeNoticeCounter {
 public:
  // Feeds bytes as they come; lines may be split anywhere.
  void feed(const char* data, size_t size);
  // Distinct ranks that reported so far.
  int ranks() const { return static_cast<int>(ranks_.size()); }
  // The first non-zero exit status reported, else 0.
  int exitStatus() const { return exit_status_; }
  // Whether a timed-out MPI wait's error (which ends the job) was seen, and
  // the grace it gave before MPI_Abort (the first one's).
  bool abortSeen() const { return abort_seen_; }
  double abortGraceSeconds() const { return abort_grace_seconds_; }

 private:
  void line(const std::string& text);

  std::string pending_;  // bytes after the last newline (bounded)
  std::vector<int> ranks_;
  int exit_status_ = 0;
  bool abort_seen_ = false;
  double abort_grace_seconds_ = 0;
};

struct MpirunWatch {
  int np = 0;                    // ranks of the job; 0 (unknown): no bound after the ranks left
  double exit_wait_seconds = 2;  // from the last rank's finalize notice to SIGTERM
  // After the announced MPI_Abort, to SIGTERM: a mpirun that can reach every
  // daemon ends the job within milliseconds of the abort; one that cannot
  // (a cut link) would wait forever.
  double abort_margin_seconds = 0.25;
  double grace_seconds = 5;  // SIGTERM -> SIGKILL
};

// Runs `argv` (argv[0] "mpirun", looked up in PATH) with tuttirun's
// environment and returns tuttirun's exit code (see above); kExitStartFailed
// with a message when mpirun cannot be started.
int runMpirun(const std::vector<std::string>& argv, const MpirunWatch& watch);

}  // namespace launcher
}  // namespace tutti

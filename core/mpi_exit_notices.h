#pragma once

// Two lines a rank of an mpi-backend job prints about how it ends, and their
// reading by tuttirun --mpi (launcher/mpirun_watch.h), which bounds a mpirun
// that stays after them:
//  - the warning when MPI_Finalize did not return in time and the rank
//    leaves without it (ops/mpi/mpi_environment.h);
//  - the error of an MPI wait that timed out, which ends the job with
//    MPI_Abort (ops/mpi/mpi_wait.h).
// No MPI here: the launcher includes this header.

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tutti {

// "rank 2: MPI_Finalize did not return within 5 s after every rank had
// finished (...); leaving with exit status 0 without it"
inline std::string finalizeGiveUpNotice(int rank, int exit_status, double seconds) {
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%g", seconds);
  return "rank " + std::to_string(rank) + ": MPI_Finalize did not return within " + secs +
         " s after every rank had finished (Open MPI's runtime is stuck, e.g. mpirun's PMIx "
         "server held by a stray connection to its port); leaving with exit status " +
         std::to_string(exit_status) + " without it";
}

// Finds a finalizeGiveUpNotice in `line` (any prefix, e.g. mpirun's
// "[1,2]<stderr>:" and the log's); false when there is none.
inline bool parseFinalizeGiveUpNotice(const std::string& line, int* rank, int* exit_status) {
  static const std::string kMiddle = ": MPI_Finalize did not return within ";
  static const std::string kStatus = "; leaving with exit status ";
  const size_t middle = line.find(kMiddle);
  if (middle == std::string::npos) return false;
  const size_t word = line.rfind("rank ", middle);
  const size_t status = line.find(kStatus, middle);
  if (word == std::string::npos || status == std::string::npos) return false;
  const std::string digits = line.substr(word + 5, middle - word - 5);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  const char* s = line.c_str() + status + kStatus.size();
  char* end = nullptr;
  const long value = std::strtol(s, &end, 10);
  if (end == s) return false;
  *rank = std::atoi(digits.c_str());
  *exit_status = static_cast<int>(value);
  return true;
}

// The end of a timed-out MPI wait's error: "...; Open MPI cannot cancel the
// call, so this job ends with MPI_Abort in 2 s" (`why` replaces the part
// before ", so").
inline std::string mpiAbortNotice(double grace_seconds,
                                  const char* why = "Open MPI cannot cancel the call") {
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%g", grace_seconds);
  return std::string(why) + ", so this job ends with MPI_Abort in " + secs + " s";
}

// Finds an mpiAbortNotice in `line` and its grace; false when there is none.
inline bool parseMpiAbortNotice(const std::string& line, double* grace_seconds) {
  static const std::string kText = "so this job ends with MPI_Abort in ";
  const size_t at = line.find(kText);
  if (at == std::string::npos) return false;
  const char* s = line.c_str() + at + kText.size();
  char* end = nullptr;
  const double value = std::strtod(s, &end);
  if (end == s || !(value >= 0)) return false;
  *grace_seconds = value;
  return true;
}

}  // namespace tutti

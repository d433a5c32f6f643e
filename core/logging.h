#pragma once

// Logging to stderr, one whole line per message (safe from any thread).
// Level from TUTTI_LOG_LEVEL (trace, debug, info, warning, error; default
// warning). Usage: TUTTI_LOG(kWarning) << "tensor " << name << " stalled";

#include <sstream>
#include <string>

namespace tutti {

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4 };

LogLevel logLevel();
void setLogLevel(LogLevel level);
// Sets the rank shown in the prefix of this process's log lines (-1: none).
void setLogRank(int rank);
bool parseLogLevel(const std::string& name, LogLevel* out);

namespace detail {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostream& stream() { return out_; }

 private:
  LogLevel level_;
  std::ostringstream out_;
};
}  // namespace detail

}  // namespace tutti

#define TUTTI_LOG(level)                                \
  if (::tutti::LogLevel::level < ::tutti::logLevel()) { \
  } else                                                \
    ::tutti::detail::LogLine(::tutti::LogLevel::level, __FILE__, __LINE__).stream()

#include "core/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tutti {
namespace {

LogLevel initialLevel() {
  const char* env = std::getenv("TUTTI_LOG_LEVEL");
  LogLevel level = LogLevel::kWarning;
  if (env != nullptr) parseLogLevel(env, &level);
  return level;
}

std::atomic<int>& levelStore() {
  static std::atomic<int> level{static_cast<int>(initialLevel())};
  return level;
}

std::atomic<int> g_rank{-1};

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "TRACE";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

}  // namespace

LogLevel logLevel() {
  return static_cast<LogLevel>(levelStore().load(std::memory_order_relaxed));
}
void setLogLevel(LogLevel level) {
  levelStore().store(static_cast<int>(level));
}
void setLogRank(int rank) {
  g_rank.store(rank);
}

bool parseLogLevel(const std::string& name, LogLevel* out) {
  static const char* names[] = {"trace", "debug", "info", "warning", "error"};
  for (int i = 0; i < 5; ++i) {
    if (name == names[i]) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

namespace detail {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  out_ << "[tutti " << levelName(level);
  int rank = g_rank.load();
  if (rank >= 0) out_ << " rank " << rank;
  out_ << " " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogLine::~LogLine() {
  out_ << '\n';
  const std::string text = out_.str();
  // One fwrite of the whole line: lines from different threads never interleave.
  std::fwrite(text.data(), 1, text.size(), stderr);
  if (level_ >= LogLevel::kWarning) std::fflush(stderr);
}

}  // namespace detail
}  // namespace tutti

#pragma once

// Invariant checks: a failed check is a bug in tutti, not a user error. It
// prints both operands and file:line, then aborts. User and runtime errors are
// Status values (core/status.h), never checks. See docs/errors.md.

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace tutti::detail {
[[noreturn]] inline void checkFailed(const char* file, int line, const std::string& what) {
  std::ostringstream out;
  out << "tutti: internal check failed at " << file << ":" << line << ": " << what << "\n";
  std::cerr << out.str() << std::flush;
  std::abort();
}
}  // namespace tutti::detail

#define TUTTI_CHECK(cond)                                                 \
  do {                                                                    \
    if (!(cond)) ::tutti::detail::checkFailed(__FILE__, __LINE__, #cond); \
  } while (0)

#define TUTTI_CHECK_OP(a, b, op)                                    \
  do {                                                              \
    const auto& _va = (a);                                          \
    const auto& _vb = (b);                                          \
    if (!(_va op _vb)) {                                            \
      std::ostringstream _os;                                       \
      _os << #a " " #op " " #b " (" << _va << " vs " << _vb << ")"; \
      ::tutti::detail::checkFailed(__FILE__, __LINE__, _os.str());  \
    }                                                               \
  } while (0)

#define TUTTI_CHECK_EQ(a, b) TUTTI_CHECK_OP(a, b, ==)
#define TUTTI_CHECK_NE(a, b) TUTTI_CHECK_OP(a, b, !=)
#define TUTTI_CHECK_LT(a, b) TUTTI_CHECK_OP(a, b, <)
#define TUTTI_CHECK_LE(a, b) TUTTI_CHECK_OP(a, b, <=)
#define TUTTI_CHECK_GE(a, b) TUTTI_CHECK_OP(a, b, >=)

#include "base/check.h"

#include <cstdio>

namespace specstack::detail {

void check_failed(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "specstack: internal check failed at %s:%d: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace specstack::detail

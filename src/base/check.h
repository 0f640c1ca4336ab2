// Check macros for broken internal invariants (tier 2 of DESIGN.md errors):
// they print expected vs actual with the source location and abort. Never use
// them on user input; that gets a Status.
#pragma once

#include <cstdlib>
#include <sstream>
#include <string>

namespace specstack::detail {

[[noreturn]] void check_failed(const char* file, int line, const std::string& what);

template <typename A, typename B>
std::string describe_pair(const char* expr_a, const char* op, const char* expr_b, const A& a,
                          const B& b) {
  std::ostringstream out;
  out << expr_a << " " << op << " " << expr_b << " (" << a << " vs " << b << ")";
  return out.str();
}

}  // namespace specstack::detail

#define SS_CHECK(cond)                                                         \
  do {                                                                         \
    if (!(cond)) ::specstack::detail::check_failed(__FILE__, __LINE__, #cond); \
  } while (0)

#define SS_CHECK_MSG(cond, msg)                                                                  \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      ::specstack::detail::check_failed(__FILE__, __LINE__, std::string(#cond) + ": " + (msg)); \
  } while (0)

#define SS_CHECK_OP(a, op, b)                                                              \
  do {                                                                                     \
    const auto& ss_a_ = (a);                                                               \
    const auto& ss_b_ = (b);                                                               \
    if (!(ss_a_ op ss_b_))                                                                 \
      ::specstack::detail::check_failed(                                                   \
          __FILE__, __LINE__, ::specstack::detail::describe_pair(#a, #op, #b, ss_a_, ss_b_)); \
  } while (0)

#define SS_CHECK_EQ(a, b) SS_CHECK_OP(a, ==, b)
#define SS_CHECK_NE(a, b) SS_CHECK_OP(a, !=, b)
#define SS_CHECK_LT(a, b) SS_CHECK_OP(a, <, b)
#define SS_CHECK_LE(a, b) SS_CHECK_OP(a, <=, b)
#define SS_CHECK_GT(a, b) SS_CHECK_OP(a, >, b)
#define SS_CHECK_GE(a, b) SS_CHECK_OP(a, >=, b)

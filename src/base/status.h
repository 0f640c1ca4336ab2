// Status and Result<T>: the error tier for untrusted input and resource
// outcomes (DESIGN.md "Errors, three tiers"). g++ 12 has no std::expected, so
// this is the small subset we need, with the same spelling where it overlaps.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace specstack {

// What kind of failure an Error is, so the HTTP layer can pick a status code.
enum class ErrorCode : uint8_t {
  kErrorInvalidArgument,   // bad input (400)
  kErrorNotFound,          // unknown model / route (404)
  kErrorResourceExhausted, // queue full, request can never fit (429 / 503)
  kErrorInternal,          // a bug or an environment failure (500)
};

// An error a user can act on: one line saying what is wrong and where.
struct Error {
  std::string message;
  ErrorCode code = ErrorCode::kErrorInvalidArgument;
};

inline Error make_error(std::string message,
                        ErrorCode code = ErrorCode::kErrorInvalidArgument) {
  return Error{std::move(message), code};
}

template <typename... Args>
Error errorf(fmt::format_string<Args...> format, Args&&... args) {
  return Error{fmt::format(format, std::forward<Args>(args)...)};
}

// Result<T> holds a T or an Error. Accessing the wrong alternative aborts
// (an internal bug, not a user error).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}   // NOLINT: implicit by design
  Result(Error error) : value_(std::move(error)) {}  // NOLINT

  bool ok() const { return value_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(value_); }
  const T& value() const& { assert(ok()); return std::get<0>(value_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { assert(!ok()); return std::get<1>(value_); }
  const std::string& message() const { return error().message; }

 private:
  std::variant<T, Error> value_;
};

// Status is Result<void>: ok, or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}  // NOLINT
  static Status ok_status() { return Status(); }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { assert(!ok()); return *error_; }
  const std::string& message() const { return error().message; }

 private:
  std::optional<Error> error_;
};

}  // namespace specstack

// Early-return helpers for functions returning Status or Result<T>.
#define SS_TRY(expr)                                          \
  do {                                                        \
    auto ss_try_status_ = (expr);                             \
    if (!ss_try_status_.ok()) return ss_try_status_.error();  \
  } while (0)

#define SS_CONCAT_INNER(a, b) a##b
#define SS_CONCAT(a, b) SS_CONCAT_INNER(a, b)
#define SS_ASSIGN_OR_RETURN(lhs, expr) \
  SS_ASSIGN_OR_RETURN_IMPL(SS_CONCAT(ss_result_, __LINE__), lhs, expr)
#define SS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.error();             \
  lhs = std::move(tmp).value()

#include "server/errors.h"

#include <nlohmann/json.hpp>

namespace specstack {

int http_status_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kErrorInvalidArgument:
      return 400;
    case ErrorCode::kErrorNotFound:
      return 404;
    case ErrorCode::kErrorResourceExhausted:
      return 429;
    case ErrorCode::kErrorInternal:
      return 500;
  }
  return 500;
}

const char* error_type_for_status(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

ApiError api_error_from(const Error& error) {
  ApiError api = make_api_error(http_status_for(error.code), error.message);
  if (error.code == ErrorCode::kErrorResourceExhausted) {
    // The waiting queue drains as running requests finish; a second is a
    // reasonable first back-off for a client that honours the header.
    api.retry_after_seconds = 1;
  }
  return api;
}

ApiError make_api_error(int status, std::string message, std::optional<std::string> code) {
  ApiError api;
  api.status = status;
  api.message = std::move(message);
  api.code = std::move(code);
  return api;
}

ApiError shutting_down_error(std::string message) {
  ApiError api = make_api_error(503, std::move(message), "server_shutting_down");
  api.type = "server_shutting_down";
  // Long enough for a load balancer to have noticed /health's 503 and for a
  // restarted replica to come up; clients retrying sooner only get 503 again.
  api.retry_after_seconds = 5;
  return api;
}

ApiError request_timeout_error(std::string message) {
  ApiError api = make_api_error(504, std::move(message), "request_timeout");
  api.type = "timeout";
  return api;
}

std::string error_body(const ApiError& error) {
  nlohmann::ordered_json inner;
  inner["message"] = error.message;
  inner["type"] = error.type.empty() ? error_type_for_status(error.status) : error.type;
  inner["param"] = error.param ? nlohmann::ordered_json(*error.param) : nullptr;
  inner["code"] = error.code ? nlohmann::ordered_json(*error.code) : nullptr;
  nlohmann::ordered_json body;
  body["error"] = std::move(inner);
  // Messages may quote client bytes; replacing invalid UTF-8 keeps dump() from throwing.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace specstack

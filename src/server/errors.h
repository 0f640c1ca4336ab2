// OpenAI-shaped error responses: {"error": {"message", "type", "param",
// "code"}} with the HTTP status that goes with them. Everything the server
// rejects ends up here, so clients see one error shape for every failure.
#pragma once

#include <optional>
#include <string>

#include "base/status.h"

namespace specstack {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type;                  // "" -> derived from status
  std::optional<std::string> param;  // the offending request field, when known
  std::optional<std::string> code;   // OpenAI's machine-readable code, when there is one
  int retry_after_seconds = 0;       // > 0: send a Retry-After header (429 / 503)
};

// kErrorInvalidArgument -> 400, kErrorNotFound -> 404,
// kErrorResourceExhausted -> 429, kErrorInternal -> 500.
int http_status_for(ErrorCode code);

// The error type OpenAI uses for a status ("invalid_request_error", ...).
const char* error_type_for_status(int status);

// An Error from the engine or a parser, as the client will see it. Queue-full
// (kErrorResourceExhausted) carries a Retry-After.
ApiError api_error_from(const Error& error);

ApiError make_api_error(int status, std::string message,
                        std::optional<std::string> code = std::nullopt);

// 503 "server_shutting_down" with Retry-After: the server is draining (new
// requests) or its drain timeout cut the request (`message` says which).
ApiError shutting_down_error(std::string message);

// 504 "timeout": the request's deadline passed before it finished. 504, not
// 408: 408 means the client was too slow to send its request, which is not
// what happened; 504 says the server did not produce the answer in time.
ApiError request_timeout_error(std::string message);

// The JSON body text. Never throws: invalid UTF-8 in the message is replaced.
std::string error_body(const ApiError& error);

}  // namespace specstack

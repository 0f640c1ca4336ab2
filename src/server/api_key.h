// The API key check of --api-key: "Authorization: Bearer <key>", the scheme
// in any letter case (RFC 7235), the key compared in a time that does not
// depend on the real key.
#pragma once

#include <optional>
#include <string_view>

#include "server/errors.h"

namespace specstack {

// Whether `given` is `expected`, in a time that depends only on given.size()
// (which the client knows anyway): not on where the first difference is, and
// not on the expected key's length or content. `expected` is not empty.
bool same_secret(std::string_view given, std::string_view expected);

// The credentials of "Authorization: <scheme> <credentials>" when the scheme
// is Bearer in any letter case and one or more spaces separate them; nullopt
// otherwise.
std::optional<std::string_view> bearer_credentials(std::string_view header);

// nullopt when `authorization` (the header's value, "" if absent) carries
// `api_key` (not empty); else the 401 "invalid_api_key" to send, saying
// whether the header was missing, not Bearer, or had the wrong key.
std::optional<ApiError> check_api_key(std::string_view authorization, std::string_view api_key);

}  // namespace specstack

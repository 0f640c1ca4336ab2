#include "server/api_key.h"

#include <cctype>
#include <cstddef>

namespace specstack {

// Every byte of `given` is compared, against the key's byte at the same index
// or, past the key's end, its first byte (chosen with a mask, not a branch);
// the length check is folded into the same accumulator.
bool same_secret(std::string_view given, std::string_view expected) {
  const size_t n_expected = expected.size();
  // volatile: the compiler may not turn the loop into an early exit.
  volatile unsigned diff = static_cast<unsigned>((given.size() ^ n_expected) != 0);
  for (size_t i = 0; i < given.size(); ++i) {
    const size_t in_key = size_t{0} - static_cast<size_t>(i < n_expected);  // all ones or 0
    const auto want = static_cast<unsigned char>(expected[i & in_key]);
    diff = diff | static_cast<unsigned char>(given[i] ^ want);
  }
  return diff == 0;
}

std::optional<std::string_view> bearer_credentials(std::string_view header) {
  constexpr std::string_view kBearer = "bearer";
  if (header.size() <= kBearer.size()) return std::nullopt;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBearer[i]) return std::nullopt;
  }
  std::string_view rest = header.substr(kBearer.size());
  const size_t start = rest.find_first_not_of(' ');
  if (start == 0 || start == std::string_view::npos) return std::nullopt;
  return rest.substr(start);
}

std::optional<ApiError> check_api_key(std::string_view authorization, std::string_view api_key) {
  if (authorization.empty()) {
    return make_api_error(401, "Missing API key: send 'Authorization: Bearer <key>'",
                          "invalid_api_key");
  }
  const std::optional<std::string_view> key = bearer_credentials(authorization);
  if (!key) {
    return make_api_error(
        401, "The Authorization header must use the Bearer scheme: 'Authorization: Bearer <key>'",
        "invalid_api_key");
  }
  if (!same_secret(*key, api_key)) {
    return make_api_error(401, "Incorrect API key provided", "invalid_api_key");
  }
  return std::nullopt;
}

}  // namespace specstack

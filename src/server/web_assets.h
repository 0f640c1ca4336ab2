// The web UI's static files (web/ in the source tree), compiled into the
// binary by cmake/embed_web.cmake, and how `serve` answers for them: the
// page at / and its files under /assets/, with a Content-Security-Policy
// that allows only this origin's scripts and styles (no inline script, no
// external origin) and ETag revalidation.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specstack {

struct WebAsset {
  std::string_view path;          // "/assets/main.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view body;
  std::string_view etag;  // quoted, e.g. "\"3f2a...\""
};

// Every embedded file; defined in the generated web_assets.cpp.
std::span<const WebAsset> web_assets();

// The file served at `path`: "/" is /assets/index.html; null for any other
// path (the server then answers 404 as for any unknown route).
const WebAsset* find_web_asset(std::string_view path);

inline constexpr std::string_view kWebContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct WebResponse {
  int status = 200;  // 200, or 304 when if_none_match names the current ETag
  std::string_view content_type;
  std::string_view body;  // empty for 304
  std::vector<std::pair<std::string, std::string>> headers;
};

// The answer to GET `asset` with the request's If-None-Match ("" if absent).
// Cache-Control: no-cache, so a browser revalidates (a cheap 304) and a new
// binary's page is never mixed with an old one's scripts.
WebResponse web_asset_response(const WebAsset& asset, std::string_view if_none_match);

}  // namespace specstack

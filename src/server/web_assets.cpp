#include "server/web_assets.h"

namespace specstack {

const WebAsset* find_web_asset(std::string_view path) {
  if (path == "/") path = "/assets/index.html";
  for (const WebAsset& asset : web_assets()) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

WebResponse web_asset_response(const WebAsset& asset, std::string_view if_none_match) {
  WebResponse out;
  out.content_type = asset.content_type;
  out.headers = {{"ETag", std::string(asset.etag)},
                 {"Cache-Control", "no-cache"},
                 {"Content-Security-Policy", std::string(kWebContentSecurityPolicy)},
                 {"X-Content-Type-Options", "nosniff"},
                 {"Referrer-Policy", "no-referrer"}};
  // If-None-Match may list several tags, or "*" (RFC 9110 13.1.2).
  const bool match = if_none_match == "*" || (!if_none_match.empty() &&
                                              if_none_match.find(asset.etag) != std::string::npos);
  if (match) {
    out.status = 304;
    return out;
  }
  out.body = asset.body;
  return out;
}

}  // namespace specstack

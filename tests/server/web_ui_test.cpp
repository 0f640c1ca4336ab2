// The embedded web UI: every file of web/ is compiled in with its content
// type, / serves the page with a Content-Security-Policy that forbids inline
// script and other origins, a matching ETag gets a 304, and with web_ui off
// (serve --no-web-ui) / is a 404 like any unknown route.
#include <gtest/gtest.h>
#include <httplib.h>

#include <regex>

#include "fake_engine_server.h"
#include "server/web_assets.h"

namespace specstack {
namespace {

TEST(WebAssets, EveryFileHasATypeAndTheIndexIsTheRoot) {
  ASSERT_GE(web_assets().size(), 5u);  // index.html, app.css, main.js and its modules
  for (const WebAsset& asset : web_assets()) {
    SCOPED_TRACE(std::string(asset.path));
    EXPECT_TRUE(asset.path.starts_with("/assets/"));
    EXPECT_FALSE(asset.body.empty());
    EXPECT_TRUE(asset.content_type.starts_with("text/"));
    EXPECT_EQ(asset.etag.front(), '"');
  }
  const WebAsset* root = find_web_asset("/");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->path, "/assets/index.html");
  EXPECT_EQ(root->content_type, "text/html; charset=utf-8");
  ASSERT_NE(find_web_asset("/assets/main.js"), nullptr);
  EXPECT_EQ(find_web_asset("/assets/main.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(find_web_asset("/assets/nope.js"), nullptr);
  EXPECT_EQ(find_web_asset("/index.html"), nullptr);
}

// The CSP forbids inline script anyway; the page must not need any, or it
// would break under its own policy.
TEST(WebAssets, ThePageHasNoInlineScriptOrHandlers) {
  const std::string html(find_web_asset("/")->body);
  const std::regex script("<script([^>]*)>", std::regex::icase);
  int scripts = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), script);
       it != std::sregex_iterator(); ++it) {
    ++scripts;
    EXPECT_NE((*it)[1].str().find("src=\"/assets/"), std::string::npos) << (*it)[0];
  }
  EXPECT_EQ(scripts, 1);
  EXPECT_FALSE(std::regex_search(html, std::regex("\\son[a-z]+\\s*=", std::regex::icase)));
  EXPECT_EQ(html.find("http://"), std::string::npos);  // no other origin
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST(WebAssets, MatchingEtagIsNotModified) {
  const WebAsset& asset = *find_web_asset("/assets/app.css");
  WebResponse fresh = web_asset_response(asset, "");
  EXPECT_EQ(fresh.status, 200);
  EXPECT_EQ(fresh.body, asset.body);
  WebResponse same = web_asset_response(asset, std::string("W/\"x\", ") + std::string(asset.etag));
  EXPECT_EQ(same.status, 304);
  EXPECT_TRUE(same.body.empty());
  EXPECT_EQ(web_asset_response(asset, "\"other\"").status, 200);
}

class WebUiHttpTest : public testing::FakeEngineServerTest {};

TEST_F(WebUiHttpTest, ServesThePageWithItsHeaders) {
  HttpServerOptions options;
  options.web_ui = true;
  options.api_key = "secret";  // the page itself is open; it asks for the key
  start_server(options);
  httplib::Client cli("127.0.0.1", port_);
  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  const std::string csp = page->get_header_value("Content-Security-Policy");
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
  EXPECT_EQ(page->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_NE(page->body.find("/assets/main.js"), std::string::npos);

  auto script = cli.Get("/assets/main.js");
  ASSERT_TRUE(script);
  EXPECT_EQ(script->status, 200);
  EXPECT_EQ(script->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  const std::string etag = script->get_header_value("ETag");
  ASSERT_FALSE(etag.empty());
  auto again = cli.Get("/assets/main.js", httplib::Headers{{"If-None-Match", etag}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 304);
  EXPECT_TRUE(again->body.empty());

  auto missing = cli.Get("/assets/missing.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("Unknown route: GET /assets/missing.js"), std::string::npos);
  // The API behind it still needs the key.
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
}

TEST_F(WebUiHttpTest, OffMeansNotFound) {
  start_server(HttpServerOptions{});  // web_ui defaults to off (serve --no-web-ui)
  httplib::Client cli("127.0.0.1", port_);
  for (const char* path : {"/", "/assets/main.js"}) {
    auto res = cli.Get(path);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_NE(res->body.find("Unknown route"), std::string::npos);
  }
}

}  // namespace
}  // namespace specstack

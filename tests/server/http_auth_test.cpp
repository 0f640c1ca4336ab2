// --api-key: the Bearer scheme in any letter case (RFC 7235), keys compared
// whole (shorter, longer and same-length wrong keys all fail), and only the
// /v1 routes guarded: /health and /metrics stay open.
#include <gtest/gtest.h>

#include "early_end_test_util.h"
#include "fake_engine_server.h"

namespace specstack {
namespace {

class HttpAuthTest : public testing::FakeEngineServerTest {
 protected:
  void SetUp() override {
    FakeEngineServerTest::SetUp();
    HttpServerOptions options;
    options.api_key = "sekrit-key";
    start_server(options);
  }
  int status_with(const std::string& authorization) {
    return testing::post_any(port_, "/v1/completions", R"({"prompt": "x"})",
                             {{"Authorization", authorization}})
        .status;
  }
};

TEST_F(HttpAuthTest, TheBearerSchemeIsCaseInsensitive) {
  for (const char* scheme : {"Bearer", "bearer", "BEARER", "bEaReR"}) {
    EXPECT_EQ(status_with(std::string(scheme) + " sekrit-key"), 200) << scheme;
  }
  EXPECT_EQ(status_with("Bearer    sekrit-key"), 200);  // 1*SP
}

TEST_F(HttpAuthTest, WrongKeysOfEveryLengthAre401) {
  for (const char* key :
       {"", "s", "sekrit-ke", "sekrit-kez", "Sekrit-key", "sekrit-key2", "sekrit-keysekrit-key"}) {
    EXPECT_EQ(status_with(std::string("Bearer ") + key), 401) << "'" << key << "'";
  }
}

TEST_F(HttpAuthTest, OtherSchemesAndMalformedHeadersAre401) {
  for (const char* header :
       {"Basic sekrit-key", "Bearersekrit-key", "sekrit-key", "Bearer", "Token sekrit-key"}) {
    const testing::RawResponse res = testing::post_any(
        port_, "/v1/completions", R"({"prompt": "x"})", {{"Authorization", header}});
    EXPECT_EQ(res.status, 401) << header;
    const OrderedJson error = OrderedJson::parse(res.body)["error"];
    EXPECT_EQ(error["code"], "invalid_api_key");
    EXPECT_EQ(error["type"], "authentication_error");
  }
  EXPECT_TRUE(engine_.submitted().empty());
}

TEST_F(HttpAuthTest, HealthAndMetricsStayOpen) {
  EXPECT_EQ(testing::get_any(port_, "/health").status, 200);
  EXPECT_EQ(testing::get_any(port_, "/metrics").status, 200);
  EXPECT_EQ(testing::get_any(port_, "/v1/models").status, 401);
}

}  // namespace
}  // namespace specstack

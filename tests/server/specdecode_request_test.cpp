// The speculative decoding control in request bodies: `speculative_decoding`,
// top level or in extra_body, on both endpoints, lands in
// RequestOptions::specdecode; a wrong type is a 400 naming the field.
#include <gtest/gtest.h>

#include "server/errors.h"
#include "server/openai_request.h"
#include "server_test_util.h"

namespace specstack {
namespace {

class SpecDecodeRequestTest : public testing::EndpointRequestTest {
 protected:
  std::optional<bool> parse_ok(const std::string& fields) {
    const auto options = parse_options(fields);
    return options ? options->specdecode.enabled : std::nullopt;
  }
};

TEST_P(SpecDecodeRequestTest, AbsentOrNullMeansTheServerDecides) {
  EXPECT_FALSE(parse_ok("").has_value());
  EXPECT_FALSE(parse_ok(R"("speculative_decoding": null)").has_value());
}

TEST_P(SpecDecodeRequestTest, TopLevelTrueAndFalse) {
  EXPECT_EQ(parse_ok(R"("speculative_decoding": true)"), std::optional<bool>(true));
  EXPECT_EQ(parse_ok(R"("speculative_decoding": false)"), std::optional<bool>(false));
}

TEST_P(SpecDecodeRequestTest, ExtraBodyCountsAndWins) {
  EXPECT_EQ(parse_ok(R"("extra_body": {"speculative_decoding": false})"),
            std::optional<bool>(false));
  // extra_body wins over a top-level field of the same name (vLLM's merge).
  EXPECT_EQ(
      parse_ok(R"("speculative_decoding": false, "extra_body": {"speculative_decoding": true})"),
      std::optional<bool>(true));
  // Independent of the speculative prefill controls beside it.
  auto request = parse_openai_request(
      GetParam(), body(R"("specprefill": true, "extra_body": {"speculative_decoding": false})"),
      model_);
  ASSERT_TRUE(request.ok()) << request.message();
  EXPECT_EQ(request->options.specprefill.enabled, std::optional<bool>(true));
  EXPECT_EQ(request->options.specdecode.enabled, std::optional<bool>(false));
}

TEST_P(SpecDecodeRequestTest, WrongTypesNameTheField) {
  EXPECT_EQ(parse_400(R"("speculative_decoding": "yes")"),
            "'speculative_decoding' must be a boolean, got string");
  EXPECT_EQ(parse_400(R"("speculative_decoding": 1)"),
            "'speculative_decoding' must be a boolean, got number");
  EXPECT_EQ(parse_400(R"("extra_body": {"speculative_decoding": [true]})"),
            "'speculative_decoding' must be a boolean, got array");
}

INSTANTIATE_TEST_SUITE_P(BothEndpoints, SpecDecodeRequestTest,
                         ::testing::Values(ApiEndpoint::kApiCompletions,
                                           ApiEndpoint::kApiChatCompletions),
                         [](const ::testing::TestParamInfo<ApiEndpoint>& info) {
                           return info.param == ApiEndpoint::kApiCompletions ? "Completions"
                                                                             : "ChatCompletions";
                         });

}  // namespace
}  // namespace specstack

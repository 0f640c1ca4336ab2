// Speculative prefill controls in request bodies: `specprefill` and
// `specprefill_keep_pct`, top level or in extra_body, on both endpoints, land
// in RequestOptions::specprefill; wrong types and out-of-range values are 400s
// naming the field.
#include <gtest/gtest.h>

#include "server/errors.h"
#include "server/openai_request.h"
#include "server_test_util.h"

namespace specstack {
namespace {

class SpecPrefillRequestTest : public testing::EndpointRequestTest {
 protected:
  SpecPrefillControls parse_ok(const std::string& fields) {
    const auto options = parse_options(fields);
    return options ? options->specprefill : SpecPrefillControls{};
  }
};

TEST_P(SpecPrefillRequestTest, AbsentMeansTheServerDecides) {
  const SpecPrefillControls specprefill = parse_ok("");
  EXPECT_FALSE(specprefill.enabled.has_value());
  EXPECT_FALSE(specprefill.keep_pct.has_value());
  // null is "use the default", as for every other optional field.
  const SpecPrefillControls nulls =
      parse_ok(R"("specprefill": null, "specprefill_keep_pct": null)");
  EXPECT_FALSE(nulls.enabled.has_value());
  EXPECT_FALSE(nulls.keep_pct.has_value());
}

TEST_P(SpecPrefillRequestTest, TopLevelFields) {
  SpecPrefillControls specprefill = parse_ok(R"("specprefill": true, "specprefill_keep_pct": 0.3)");
  EXPECT_EQ(specprefill.enabled, std::optional<bool>(true));
  EXPECT_EQ(specprefill.keep_pct, std::optional<double>(0.3));
  specprefill = parse_ok(R"("specprefill": false)");
  EXPECT_EQ(specprefill.enabled, std::optional<bool>(false));
  EXPECT_FALSE(specprefill.keep_pct.has_value());
  // The upper bound is included; an integer is a number.
  EXPECT_EQ(parse_ok(R"("specprefill_keep_pct": 1)").keep_pct, std::optional<double>(1.0));
  EXPECT_EQ(parse_ok(R"("specprefill_keep_pct": 1e-3)").keep_pct, std::optional<double>(0.001));
}

TEST_P(SpecPrefillRequestTest, ExtraBodyFieldsCountAndWin) {
  SpecPrefillControls specprefill =
      parse_ok(R"("extra_body": {"specprefill": true, "specprefill_keep_pct": 0.5})");
  EXPECT_EQ(specprefill.enabled, std::optional<bool>(true));
  EXPECT_EQ(specprefill.keep_pct, std::optional<double>(0.5));
  // extra_body wins over a top-level field of the same name (vLLM's merge).
  specprefill = parse_ok(
      R"("specprefill": false, "specprefill_keep_pct": 0.9,
         "extra_body": {"specprefill": true, "specprefill_keep_pct": 0.25})");
  EXPECT_EQ(specprefill.enabled, std::optional<bool>(true));
  EXPECT_EQ(specprefill.keep_pct, std::optional<double>(0.25));
  // One from each place.
  specprefill = parse_ok(R"("specprefill": true, "extra_body": {"specprefill_keep_pct": 0.1})");
  EXPECT_EQ(specprefill.enabled, std::optional<bool>(true));
  EXPECT_EQ(specprefill.keep_pct, std::optional<double>(0.1));
}

TEST_P(SpecPrefillRequestTest, WrongTypesNameTheField) {
  EXPECT_EQ(parse_400(R"("specprefill": "yes")"), "'specprefill' must be a boolean, got string");
  EXPECT_EQ(parse_400(R"("specprefill": 1)"), "'specprefill' must be a boolean, got number");
  EXPECT_EQ(parse_400(R"("specprefill_keep_pct": "0.2")"),
            "'specprefill_keep_pct' must be a number, got string");
  EXPECT_EQ(parse_400(R"("specprefill_keep_pct": [0.2])"),
            "'specprefill_keep_pct' must be a number, got array");
  EXPECT_EQ(parse_400(R"("extra_body": {"specprefill": {}})"),
            "'specprefill' must be a boolean, got object");
}

TEST_P(SpecPrefillRequestTest, KeepPctOutOfRange) {
  EXPECT_EQ(parse_400(R"("specprefill_keep_pct": 0)"),
            "specprefill_keep_pct must be in (0, 1], got 0");
  EXPECT_EQ(parse_400(R"("specprefill_keep_pct": -0.5)"),
            "specprefill_keep_pct must be in (0, 1], got -0.5");
  EXPECT_EQ(parse_400(R"("specprefill_keep_pct": 1.5)"),
            "specprefill_keep_pct must be in (0, 1], got 1.5");
  EXPECT_EQ(parse_400(R"("extra_body": {"specprefill_keep_pct": 2}, "specprefill_keep_pct": 0.5)"),
            "specprefill_keep_pct must be in (0, 1], got 2");
}

INSTANTIATE_TEST_SUITE_P(BothEndpoints, SpecPrefillRequestTest,
                         ::testing::Values(ApiEndpoint::kApiCompletions,
                                           ApiEndpoint::kApiChatCompletions),
                         [](const ::testing::TestParamInfo<ApiEndpoint>& info) {
                           return info.param == ApiEndpoint::kApiCompletions ? "Completions"
                                                                             : "ChatCompletions";
                         });

}  // namespace
}  // namespace specstack

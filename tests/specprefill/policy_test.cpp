// SpecPrefillPolicy: the threshold applies to the uncached suffix, request
// overrides win over it, keep_pct overrides are validated, and every "no"
// carries a reason.
#include "specprefill/policy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/check.h"

namespace specstack {
namespace {

SpecPrefillDecision decide(const SpecPrefillRequest& request,
                           SpecPrefillPolicyOptions options = {}) {
  auto decision = SpecPrefillPolicy(options).decide(request);
  SS_CHECK_MSG(decision.ok(), decision.ok() ? "" : decision.message());
  return *decision;
}

TEST(PolicyTest, ThresholdIsOnTheSuffixAfterTheCachedPrefix) {
  auto at = decide({.n_prompt_tokens = 10000, .n_cached_tokens = 10000 - 8192});
  EXPECT_TRUE(at.apply);
  EXPECT_EQ(at.n_scored_tokens, 8192);
  EXPECT_EQ(at.position_offset, 10000 - 8192);
  EXPECT_DOUBLE_EQ(at.keep_pct, 0.2);
  EXPECT_EQ(at.reason, "uncached suffix of 8192 tokens reaches the threshold 8192");

  // A long prompt whose prefix is cached has a short suffix: no.
  auto below = decide({.n_prompt_tokens = 10000, .n_cached_tokens = 10000 - 8191});
  EXPECT_FALSE(below.apply);
  EXPECT_EQ(below.reason, "uncached suffix of 8191 tokens is below the threshold 8192");

  EXPECT_FALSE(decide({.n_prompt_tokens = 8191}).apply);
  EXPECT_TRUE(decide({.n_prompt_tokens = 8192}).apply);
  EXPECT_TRUE(decide({.n_prompt_tokens = 100}, {.min_suffix_tokens = 64}).apply);
}

TEST(PolicyTest, RequestOverrides) {
  auto forced_on = decide({.n_prompt_tokens = 50, .specprefill = true});
  EXPECT_TRUE(forced_on.apply);
  EXPECT_EQ(forced_on.reason, "forced on by request");

  auto forced_off = decide({.n_prompt_tokens = 100000, .specprefill = false});
  EXPECT_FALSE(forced_off.apply);
  EXPECT_EQ(forced_off.reason, "disabled by request");

  auto keep = decide({.n_prompt_tokens = 9000, .specprefill_keep_pct = 0.5});
  EXPECT_TRUE(keep.apply);
  EXPECT_DOUBLE_EQ(keep.keep_pct, 0.5);
  EXPECT_DOUBLE_EQ(decide({.n_prompt_tokens = 9000, .specprefill_keep_pct = 1.0}).keep_pct, 1.0);
  EXPECT_DOUBLE_EQ(decide({.n_prompt_tokens = 9000}, {.default_keep_pct = 0.3}).keep_pct, 0.3);
}

TEST(PolicyTest, CannotApplyWithoutDraftOrWithNothingToPrune) {
  auto no_draft = decide({.n_prompt_tokens = 20000, .specprefill = true}, {.available = false});
  EXPECT_FALSE(no_draft.apply);
  EXPECT_EQ(no_draft.reason, "no speculative-prefill draft model");

  auto all_cached = decide({.n_prompt_tokens = 300, .n_cached_tokens = 299, .specprefill = true});
  EXPECT_FALSE(all_cached.apply);
  EXPECT_EQ(all_cached.reason, "uncached suffix of 1 tokens is too short to prune");
  EXPECT_TRUE(decide({.n_prompt_tokens = 300, .n_cached_tokens = 298, .specprefill = true}).apply);
}

TEST(PolicyTest, InvalidKeepPctIsAnError) {
  SpecPrefillPolicy policy({});
  for (double bad : {0.0, -0.1, 1.0000001, 2.0, double(NAN), double(INFINITY)}) {
    for (std::optional<bool> flag : {std::optional<bool>(), std::optional<bool>(false)}) {
      auto decision = policy.decide(
          {.n_prompt_tokens = 10000, .specprefill = flag, .specprefill_keep_pct = bad});
      ASSERT_FALSE(decision.ok()) << bad;
      EXPECT_EQ(decision.error().code, ErrorCode::kErrorInvalidArgument);
      EXPECT_NE(decision.message().find("specprefill_keep_pct must be in (0, 1]"),
                std::string::npos);
    }
  }
  EXPECT_EQ(validate_keep_pct(1.5).message(), "specprefill_keep_pct must be in (0, 1], got 1.5");
  EXPECT_TRUE(validate_keep_pct(1.0).ok());
  EXPECT_TRUE(validate_keep_pct(1e-9).ok());
}

}  // namespace
}  // namespace specstack

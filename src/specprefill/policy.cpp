#include "specprefill/policy.h"

#include "base/check.h"

namespace specstack {

Status validate_keep_pct(double keep_pct) {
  // Written so that NaN fails too.
  if (!(keep_pct > 0.0 && keep_pct <= 1.0)) {
    return errorf("specprefill_keep_pct must be in (0, 1], got {}", keep_pct);
  }
  return Status::ok_status();
}

SpecPrefillPolicy::SpecPrefillPolicy(const SpecPrefillPolicyOptions& options) : options_(options) {
  // Server configuration, validated when the flags are parsed.
  SS_CHECK_MSG(validate_keep_pct(options.default_keep_pct).ok(), "default_keep_pct out of (0, 1]");
  SS_CHECK_GE(options.min_suffix_tokens, 0);
}

Result<SpecPrefillDecision> SpecPrefillPolicy::decide(const SpecPrefillRequest& request) const {
  // The engine computes these counts; they are not user input.
  SS_CHECK_GE(request.n_cached_tokens, 0);
  SS_CHECK_LE(request.n_cached_tokens, request.n_prompt_tokens);

  SpecPrefillDecision decision;
  if (request.specprefill_keep_pct) SS_TRY(validate_keep_pct(*request.specprefill_keep_pct));
  decision.keep_pct = request.specprefill_keep_pct.value_or(options_.default_keep_pct);
  decision.position_offset = request.n_cached_tokens;
  decision.n_scored_tokens = request.n_prompt_tokens - request.n_cached_tokens;
  const int64_t suffix = decision.n_scored_tokens;

  if (request.specprefill == false) {
    decision.reason = "disabled by request";
    return decision;
  }
  if (!options_.available) {
    decision.reason = "no speculative-prefill draft model";
    return decision;
  }
  // One uncached token (or none) leaves nothing to drop: the last token is
  // always prefilled.
  if (suffix < 2) {
    decision.reason = fmt::format("uncached suffix of {} tokens is too short to prune", suffix);
    return decision;
  }
  if (request.specprefill == true) {
    decision.apply = true;
    decision.reason = "forced on by request";
    return decision;
  }
  if (suffix < options_.min_suffix_tokens) {
    decision.reason = fmt::format("uncached suffix of {} tokens is below the threshold {}", suffix,
                                  options_.min_suffix_tokens);
    return decision;
  }
  decision.apply = true;
  decision.reason = fmt::format("uncached suffix of {} tokens reaches the threshold {}", suffix,
                                options_.min_suffix_tokens);
  return decision;
}

}  // namespace specstack

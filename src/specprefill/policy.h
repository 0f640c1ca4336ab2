// SpecPrefillPolicy: whether one request's prefill goes through speculative
// prefill, and with which keep fraction (ALGORITHM.md "Inputs and defaults",
// "Composition with the prefix cache"). A pure decision: the same options and
// request always give the same answer, and a "no" is an ordinary outcome
// (with a reason for fallback_reason / logs), not an error. Only an invalid
// per-request keep_pct is an error, which the server answers with a 400.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace specstack {

struct SpecPrefillPolicyOptions {
  // The server runs a draft model set up for speculative prefill.
  bool available = true;
  // Server default: apply when the uncached suffix has at least this many tokens.
  int64_t min_suffix_tokens = 8192;
  double default_keep_pct = 0.2;  // (0, 1]
};

// What the policy needs to know about one request.
struct SpecPrefillRequest {
  int64_t n_prompt_tokens = 0;  // M
  int64_t n_cached_tokens = 0;  // P: prompt tokens the target's prefix cache already holds
  std::optional<bool> specprefill = std::nullopt;  // request "specprefill": forces on / off
  std::optional<double> specprefill_keep_pct = std::nullopt;  // request "specprefill_keep_pct"
};

struct SpecPrefillDecision {
  bool apply = false;
  double keep_pct = 0.0;        // the fraction to keep (meaningful when apply)
  int64_t n_scored_tokens = 0;  // M - P: the suffix that is scored and selected
  int64_t position_offset = 0;  // P: added to the selected token indices
  std::string reason;           // why, in a few words, for logs and fallback_reason
};

class SpecPrefillPolicy {
 public:
  explicit SpecPrefillPolicy(const SpecPrefillPolicyOptions& options);

  // Errors only when specprefill_keep_pct is present and outside (0, 1]
  // (checked even when the request turns speculative prefill off, so a bad
  // value is reported the same way whatever else the request says).
  Result<SpecPrefillDecision> decide(const SpecPrefillRequest& request) const;

 private:
  SpecPrefillPolicyOptions options_;
};

// "specprefill_keep_pct must be in (0, 1], got 1.5" unless 0 < keep_pct <= 1.
Status validate_keep_pct(double keep_pct);

}  // namespace specstack

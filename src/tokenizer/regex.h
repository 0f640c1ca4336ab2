// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for the Split
// pre-tokenizer, the GPT-2 ByteLevel split and Replace patterns. Immutable
// after compile, so one Regex serves concurrent encodes.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace specstack::tok {

struct RegexCode;  // owns the pcre2_code

class Regex {
 public:
  // literal: match the pattern text as is (HF's {"String": ...} patterns).
  static Result<Regex> compile(std::string_view pattern, bool literal = false);

  // Non-overlapping leftmost-first matches [start, end) in valid UTF-8 text,
  // in order, like onig's find_iter that HF uses. An empty match is reported
  // and the search resumes one character later. Should matching hit PCRE2's
  // resource limits (a pathological pattern from an untrusted file), the
  // remaining text is treated as unmatched.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  explicit Regex(std::shared_ptr<const RegexCode> code) : code_(std::move(code)) {}
  std::shared_ptr<const RegexCode> code_;
};

}  // namespace specstack::tok

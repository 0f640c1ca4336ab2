// The {"pattern": {"String"|"Regex": ...}, "content": ...} replacement shared
// by the Replace normalizer and the Replace decoder.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"

namespace specstack::tok {

class Replacer {
 public:
  static Result<Replacer> parse(const Json& json, const std::string& path);
  // Replaces every non-overlapping match; an empty pattern matches nothing
  // (as in HF).
  std::string apply(std::string_view text) const;

 private:
  std::string literal_;  // when regex_ is empty
  std::optional<Regex> regex_;
  std::string content_;
};

}  // namespace specstack::tok

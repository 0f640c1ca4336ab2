#include "tokenizer/replace.h"

namespace specstack::tok {

Result<Replacer> Replacer::parse(const Json& json, const std::string& path) {
  Replacer replacer;
  SS_ASSIGN_OR_RETURN(auto pattern, parse_pattern(json, "pattern", path));
  SS_ASSIGN_OR_RETURN(replacer.content_, require_string(json, "content", path));
  if (pattern.second) {
    auto regex = Regex::compile(pattern.first);
    if (!regex.ok()) return errorf("{}: {}", field_path(path, "pattern"), regex.message());
    replacer.regex_ = std::move(regex).value();
  } else {
    replacer.literal_ = std::move(pattern.first);
  }
  return replacer;
}

std::string Replacer::apply(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  if (regex_) {
    for (const auto& [start, end] : regex_->find_all(text)) {
      if (end == start) continue;  // empty matches do not replace anything
      out.append(text.substr(pos, start - pos));
      out += content_;
      pos = end;
    }
  } else if (!literal_.empty()) {
    for (size_t hit = text.find(literal_); hit != std::string_view::npos;
         hit = text.find(literal_, pos)) {
      out.append(text.substr(pos, hit - pos));
      out += content_;
      pos = hit + literal_.size();
    }
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace specstack::tok

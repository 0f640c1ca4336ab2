#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace specstack::tok {

struct RegexCode {
  pcre2_code* code = nullptr;
  ~RegexCode() { pcre2_code_free(code); }
};

namespace {

struct MatchData {
  explicit MatchData(const pcre2_code* code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* data;
};

}  // namespace

Result<Regex> Regex::compile(std::string_view pattern, bool literal) {
  // PCRE2 refuses UCP together with LITERAL (and a literal needs no classes).
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return errorf("bad regex at offset {}: {}", error_offset, reinterpret_cast<char*>(message));
  }
  auto owner = std::make_shared<RegexCode>();
  owner->code = code;
  // JIT is an optimisation only: without it pcre2_match interprets.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Regex(std::move(owner));
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  const pcre2_code* code = code_->code;
  MatchData match(code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The text is valid UTF-8 (checked once at encode's entry).
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The interpreter keeps its backtracking state on the heap instead.
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       match.data, nullptr);
    }
    if (rc < 0) break;  // no match, or a resource limit: the rest stays unmatched
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const size_t start = ovector[0], end = ovector[1];
    if (end < start || end > text.size()) break;  // \K tricks; not worth supporting
    matches.emplace_back(start, end);
    if (end > start) {
      pos = end;
    } else {
      if (end >= text.size()) break;
      pos = end + utf8_sequence_length(static_cast<unsigned char>(text[end]));
    }
  }
  return matches;
}

}  // namespace specstack::tok

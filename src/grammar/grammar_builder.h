// GrammarBuilder: assembles a Grammar rule by rule (the GBNF parser drives
// it), lowers character classes and repetitions to bytes and helper rules, and
// finishes with the checks the matcher relies on: every referenced rule is
// defined, the root exists, and no rule is left-recursive (a pushdown matcher
// would expand such a rule forever).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace specstack::grammar {

using Sequence = std::vector<Element>;
using Alternatives = std::vector<Sequence>;

// Bounds that keep a hostile grammar from exhausting memory.
struct GrammarLimits {
  uint32_t max_repetition = 1000;   // n of {m,n}
  size_t max_elements = 1'000'000;  // elements of the finished grammar
  // x{m,...} with m up to this keeps m plain copies of x (each its own
  // grammar position, classified once at compile time) before the optional
  // tail; a larger m makes the whole repetition one counter (grammar.h).
  // Small, because a counter below its minimum needs its longer tokens
  // decided per count (grammar/trie_walk.h), which a copy does not.
  uint32_t unrolled_minimum = 4;
};

class GrammarBuilder {
 public:
  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}

  // The id of a named rule, created undefined on first use; `where` (e.g.
  // "line 3, column 7") is reported if it is never defined.
  uint32_t rule_ref(std::string_view name, const std::string& where);
  // Errors when the rule was already defined.
  Status define(std::string_view name, Alternatives alternatives, const std::string& where);

  // One byte out of `set`.
  Element bytes(const ByteSet& set);
  // Appends the UTF-8 bytes of a literal string.
  void literal(const std::vector<uint32_t>& code_points, Sequence& out);
  // One code point of a class: an element, a helper rule when non-ASCII code
  // points need several bytes. `owner` names the helper rules.
  Element char_class(std::vector<CodePointRange> ranges, bool negate, std::string_view owner);
  // `sequence` as one element (itself when it is one element, else a helper rule).
  Element group(Alternatives alternatives, std::string_view owner);
  // x{min,max}; max == nullopt: unbounded. Appends to `out` one counted
  // element (grammar.h) for the whole when min > unrolled_minimum; else x
  // min times, then the optional tail as one counted element when it allows
  // two or more, else as helper rules.
  Status repeat(Element x, uint32_t min, std::optional<uint32_t> max, std::string_view owner,
                Sequence& out);

  // Checks and flattens; `root` names the start rule.
  Result<Grammar> finish(std::string_view root) &&;

 private:
  uint32_t helper(std::string_view owner, Alternatives alternatives);
  Status check_left_recursion(const std::vector<bool>& nullable) const;
  // x{0,k} as R_k ::= x R_{k-1} | "": nested helper rules.
  Element unrolled_optional(Element x, uint32_t k, std::string_view owner);
  // x{min,max} as one counted element (max may be kUnboundedRepeat).
  Element counted_element(Element x, uint32_t min, uint32_t max, std::string_view owner);

  GrammarLimits limits_;
  std::vector<std::string> names_;
  std::vector<std::optional<Alternatives>> definitions_;  // by rule id
  std::vector<std::string> first_use_;                    // where each rule was first referenced
  std::map<std::string, uint32_t, std::less<>> ids_;
  std::vector<ByteSet> byte_sets_;
  std::map<std::string, uint32_t> byte_set_ids_;  // bitset text -> id
  std::map<std::string, Element> class_cache_;    // class key -> its element
  std::vector<Repeat> repeats_;
  std::vector<std::string> repeat_owners_;  // names the helpers if a body turns out nullable
  uint32_t n_helpers_ = 0;
  size_t n_elements_ = 0;
};

}  // namespace specstack::grammar

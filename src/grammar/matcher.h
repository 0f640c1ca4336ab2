// GrammarMatcher: the incremental parser state of a grammar over bytes, a
// pushdown automaton as in llama.cpp's grammar sampler. The state is a set of
// stacks of positions in Grammar::elements: the top of each stack is the byte
// set that may come next on that path, the entries below it are where to
// return when the rule on top ends. An empty stack means the document may end
// there. Accepting a byte advances every stack whose top admits it and
// expands rule references until each top is a byte set again (the closure);
// a rule reference in tail position pushes no return address, so repetition
// (R ::= x R | "") runs in constant stack depth. A counted repetition
// (grammar.h, x{m,k}) keeps one counter entry below its body's entries: the
// iterations begun, counted up as each begins.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace specstack::grammar {

// A set of stacks, stored flat: stack i is data[begin(i), ends[i]).
struct StackSet {
  std::vector<uint32_t> data;
  std::vector<uint32_t> ends;
  std::vector<uint64_t> hashes;  // per stack: dedup compares these first

  size_t size() const { return ends.size(); }
  bool empty() const { return ends.empty(); }
  uint32_t begin(size_t i) const { return i == 0 ? 0 : ends[i - 1]; }
  void clear() {
    data.clear();
    ends.clear();
    hashes.clear();
  }
  // A canonical byte string of the set (stacks sorted), for caching masks.
  std::string key() const;
};

// Deeper stacks are refused (the path is dropped): they bound the matcher's
// recursion on hostile grammars; JSON nesting of this depth is not useful.
constexpr size_t kMaxStackDepth = 1024;

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);
  // A copy takes the state, not the scratch buffers (speculative decoding
  // copies a matcher per draft token: SpecDecodeStage::advance_grammar).
  GrammarMatcher(const GrammarMatcher& other) : grammar_(other.grammar_), stacks_(other.stacks_) {}
  GrammarMatcher& operator=(const GrammarMatcher& other) {
    grammar_ = other.grammar_;
    stacks_ = other.stacks_;
    return *this;
  }
  GrammarMatcher(GrammarMatcher&&) = default;
  GrammarMatcher& operator=(GrammarMatcher&&) = default;

  // Advances by one byte; false (and the state unchanged) when no path admits it.
  bool accept_byte(uint8_t byte);
  // All bytes or none: false leaves the state unchanged.
  bool accept_bytes(std::string_view bytes);
  // The document may end here.
  bool can_end() const;
  // The document must end here: no byte can follow.
  bool must_end() const;
  // Which bytes some path admits next.
  ByteSet next_bytes() const;

  const StackSet& stacks() const { return stacks_; }
  const Grammar& grammar() const { return *grammar_; }

  // The transition on its own, for the token-mask walk: `out` = the stacks
  // of `in` advanced by `byte` (empty when rejected). `scratch` is reused.
  static void advance(const Grammar& g, const StackSet& in, uint8_t byte, StackSet& out,
                      std::vector<uint32_t>& scratch);
  static ByteSet next_bytes(const Grammar& g, const StackSet& in);

 private:
  std::shared_ptr<const Grammar> grammar_;
  StackSet stacks_;
  StackSet next_;
  std::vector<uint32_t> scratch_;
};

}  // namespace specstack::grammar

// Grammar: a context-free grammar over bytes, in the flat form the matcher
// walks. Every rule is a list of alternatives; an alternative is a sequence of
// elements ending in kEnd; an element matches one byte out of a set, expands
// a rule, or repeats a rule a bounded number of times. Character classes over
// code points were already lowered to UTF-8 byte sequences
// (grammar/utf8_ranges.h), and most repetition operators to helper rules, by
// the GBNF parser. A bounded optional tail x{0,k} (k >= 2, x never empty)
// stays one counted element instead of k nested helper rules: every position
// inside it is then the same grammar position with a count beside it, so the
// token masks' context-independent split (grammar/trie_walk.h) classifies it
// once rather than once per character (a maxLength string).
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace specstack::grammar {

enum class ElementKind : uint8_t {
  kElementEnd,     // end of an alternative
  kElementBytes,   // one byte out of byte_sets[value]
  kElementRule,    // the rule rules[value]
  kElementRepeat,  // repeats[value]: its rule 0 to max times
};

struct Element {
  ElementKind kind = ElementKind::kElementEnd;
  uint32_t value = 0;
};

using ByteSet = std::bitset<256>;

// x{0,max} as one element; the rule never matches the empty string (the
// builder checks), so every iteration consumes at least one byte.
struct Repeat {
  uint32_t rule = 0;
  uint32_t max = 0;  // at most kMaxRepeatCount
};

// On a matcher stack a counted repetition in progress is one counter entry
// (repeat index and iterations still allowed) below its body's entries;
// the tag bit keeps it apart from element positions (at most 2^20 elements).
constexpr uint32_t kCounterTag = 1u << 31;
constexpr uint32_t kMaxRepeatCount = 1000;
// The count the context-independent split classifies with: never runs out.
constexpr uint32_t kUnboundedCount = 1023;
constexpr uint32_t counter_entry(uint32_t repeat, uint32_t count) {
  return kCounterTag | (repeat << 10) | count;
}
constexpr bool is_counter(uint32_t entry) {
  return (entry & kCounterTag) != 0;
}
constexpr uint32_t counter_repeat(uint32_t entry) {
  return (entry & ~kCounterTag) >> 10;
}
constexpr uint32_t counter_count(uint32_t entry) {
  return entry & 1023u;
}

struct Rule {
  std::string name;
  std::vector<uint32_t> alternatives;  // start positions in Grammar::elements
};

struct Grammar {
  std::vector<Element> elements;  // every alternative of every rule, each ending in kEnd
  std::vector<Rule> rules;
  std::vector<ByteSet> byte_sets;
  std::vector<Repeat> repeats;
  uint32_t root = 0;  // the rule a document must match
};

}  // namespace specstack::grammar

// Grammar: a context-free grammar over bytes, in the flat form the matcher
// walks. Every rule is a list of alternatives; an alternative is a sequence of
// elements ending in kEnd; an element matches one byte out of a set, expands
// a rule, or repeats a rule a counted number of times. Character classes over
// code points were already lowered to UTF-8 byte sequences
// (grammar/utf8_ranges.h), and short repetitions to helper rules, by the GBNF
// parser. A longer one, x{m,k} or x{m,} (x never empty), stays one counted
// element instead of m copies and k - m nested helper rules: every position
// inside it is then the same grammar position with a count beside it, so the
// token masks' context-independent split (grammar/trie_walk.h) classifies it
// once per count class rather than once per character (a minLength or
// maxLength string, minItems / maxItems arrays).
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

// x{min,max} as one element; the rule never matches the empty string (the
// builder checks), so every iteration consumes at least one byte.
constexpr uint32_t kUnboundedRepeat = ~0u;  // Repeat::max of x{m,}
struct Repeat {
  uint32_t rule = 0;
  uint32_t min = 0;  // at most kMaxRepeatCount
  uint32_t max = 0;  // min..kMaxRepeatCount, or kUnboundedRepeat
};

// On a matcher stack a counted repetition in progress is one counter entry
// (repeat index and iterations begun) below its body's entries; the tag bit
// keeps it apart from element positions (at most 2^20 elements). For x{m,}
// the count stops at m: past it every count allows the same.
constexpr uint32_t kCounterTag = 1u << 31;
constexpr uint32_t kMaxRepeatCount = 1000;
// The two counts the context-independent split classifies with (no real
// count reaches them): never runs out, and may stop / may not stop yet.
constexpr uint32_t kMustGoCount = 1022;
constexpr uint32_t kMayStopCount = 1023;
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
constexpr bool is_class_count(uint32_t count) {
  return count >= kMustGoCount;
}
// Between iterations: may the repetition end here?
constexpr bool counter_may_stop(const Repeat& r, uint32_t count) {
  return count == kMayStopCount || (count != kMustGoCount && count >= r.min);
}
// Between iterations: may another begin?
constexpr bool counter_may_iterate(const Repeat& r, uint32_t count) {
  return is_class_count(count) || r.max == kUnboundedRepeat || count < r.max;
}
// The count once one more iteration has begun.
constexpr uint32_t counter_next(const Repeat& r, uint32_t count) {
  if (is_class_count(count) || (r.max == kUnboundedRepeat && count >= r.min)) return count;
  return count + 1;
}
// The class count a real count is classified with.
constexpr uint32_t counter_class(const Repeat& r, uint32_t count) {
  return counter_may_stop(r, count) ? kMayStopCount : kMustGoCount;
}
// The longest token (in bytes) for which the class count's paths are exactly
// the real count's, for a counter below its body's entries on a parser stack
// (iterations begun = count). The i-th time a token's path meets the counter
// again it has consumed at least i bytes (every iteration consumes one) and
// the count is count + i - 1; the class differs only where that count may
// stop while the class may not (count + i - 1 >= min) or where it runs out
// (count + i - 1 >= max), and a path that differs there needs one byte more
// to tell (a token ending at the meeting is accepted either way). Class
// counts themselves: every length.
constexpr uint32_t kEveryLength = ~0u;
constexpr uint32_t counter_exact_up_to(const Repeat& r, uint32_t count) {
  if (is_class_count(count)) return kEveryLength;
  if (count < r.min) return r.min - count + 1;
  return r.max == kUnboundedRepeat ? kEveryLength : r.max - count + 1;
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

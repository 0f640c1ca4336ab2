// Grammar: a context-free grammar over bytes, in the flat form the matcher
// walks. Every rule is a list of alternatives; an alternative is a sequence of
// elements ending in kEnd; an element matches one byte out of a set or expands
// a rule. Character classes over code points were already lowered to UTF-8
// byte sequences (grammar/utf8_ranges.h), and repetition operators to helper
// rules, by the GBNF parser, so the matcher knows nothing but bytes and rules.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace specstack::grammar {

enum class ElementKind : uint8_t {
  kElementEnd,    // end of an alternative
  kElementBytes,  // one byte out of byte_sets[value]
  kElementRule,   // the rule rules[value]
};

struct Element {
  ElementKind kind = ElementKind::kElementEnd;
  uint32_t value = 0;
};

using ByteSet = std::bitset<256>;

struct Rule {
  std::string name;
  std::vector<uint32_t> alternatives;  // start positions in Grammar::elements
};

struct Grammar {
  std::vector<Element> elements;  // every alternative of every rule, each ending in kEnd
  std::vector<Rule> rules;
  std::vector<ByteSet> byte_sets;
  uint32_t root = 0;  // the rule a document must match
};

}  // namespace specstack::grammar

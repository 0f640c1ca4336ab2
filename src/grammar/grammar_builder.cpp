#include "grammar/grammar_builder.h"

#include <fmt/format.h>

namespace specstack::grammar {

namespace {

Element rule_element(uint32_t id) {
  return {ElementKind::kElementRule, id};
}

size_t count_elements(const Alternatives& alternatives) {
  size_t n = 0;
  for (const Sequence& s : alternatives) n += s.size() + 1;  // + kEnd
  return n;
}

}  // namespace

uint32_t GrammarBuilder::rule_ref(std::string_view name, const std::string& where) {
  if (auto it = ids_.find(name); it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  definitions_.emplace_back();
  first_use_.push_back(where);
  ids_.emplace(std::string(name), id);
  return id;
}

Status GrammarBuilder::define(std::string_view name, Alternatives alternatives,
                              const std::string& where) {
  const uint32_t id = rule_ref(name, where);
  if (definitions_[id]) return errorf("rule '{}' is defined twice ({})", name, where);
  n_elements_ += count_elements(alternatives);
  definitions_[id] = std::move(alternatives);
  return {};
}

uint32_t GrammarBuilder::helper(std::string_view owner, Alternatives alternatives) {
  // '#' cannot appear in a GBNF rule name, so helpers never collide with one.
  const std::string name = fmt::format("{}#{}", owner, ++n_helpers_);
  const uint32_t id = rule_ref(name, "");
  n_elements_ += count_elements(alternatives);
  definitions_[id] = std::move(alternatives);
  return id;
}

Element GrammarBuilder::bytes(const ByteSet& set) {
  const std::string key = set.to_string();
  auto [it, inserted] = byte_set_ids_.emplace(key, static_cast<uint32_t>(byte_sets_.size()));
  if (inserted) byte_sets_.push_back(set);
  return {ElementKind::kElementBytes, it->second};
}

void GrammarBuilder::literal(const std::vector<uint32_t>& code_points, Sequence& out) {
  std::vector<uint8_t> encoded;
  for (uint32_t cp : code_points) append_utf8(cp, encoded);
  for (uint8_t b : encoded) {
    ByteSet set;
    set.set(b);
    out.push_back(bytes(set));
  }
}

Element GrammarBuilder::char_class(std::vector<CodePointRange> ranges, bool negate,
                                   std::string_view owner) {
  const std::vector<CodePointRange> normalized = normalize_ranges(std::move(ranges), negate);
  std::string key;
  for (const CodePointRange& r : normalized) key += fmt::format("{:x}-{:x},", r.first, r.last);
  if (auto it = class_cache_.find(key); it != class_cache_.end()) return it->second;

  ByteSet ascii;
  Alternatives multi_byte;
  for (const CodePointRange& r : normalized) {
    for (const ByteRangeSequence& seq : utf8_sequences(r)) {
      if (seq.size() == 1) {
        for (uint32_t b = seq[0].first; b <= seq[0].second; ++b) ascii.set(b);
        continue;
      }
      Sequence s;
      for (const auto& [lo, hi] : seq) {
        ByteSet set;
        for (uint32_t b = lo; b <= hi; ++b) set.set(b);
        s.push_back(bytes(set));
      }
      multi_byte.push_back(std::move(s));
    }
  }
  Element element;
  if (multi_byte.empty()) {
    element = bytes(ascii);  // an empty class matches nothing, as it should
  } else {
    if (ascii.any()) multi_byte.insert(multi_byte.begin(), Sequence{bytes(ascii)});
    element = rule_element(helper(owner, std::move(multi_byte)));
  }
  class_cache_.emplace(std::move(key), element);
  return element;
}

Element GrammarBuilder::group(Alternatives alternatives, std::string_view owner) {
  if (alternatives.size() == 1 && alternatives[0].size() == 1) return alternatives[0][0];
  return rule_element(helper(owner, std::move(alternatives)));
}

Status GrammarBuilder::repeat(Element x, uint32_t min, std::optional<uint32_t> max,
                              std::string_view owner, Sequence& out) {
  const uint32_t bound = max.value_or(min);
  if (bound < min)
    return errorf("repetition {{{},{}}}: the maximum is below the minimum", min, bound);
  if (bound > limits_.max_repetition) {
    return errorf("repetition bound {} is over the limit of {}", bound, limits_.max_repetition);
  }
  const bool room = repeats_.size() < (1u << 21);
  if (room && min > limits_.unrolled_minimum && bound <= kMaxRepeatCount) {
    // The whole of x{m,k} / x{m,} as one counter: no copy of x per
    // required iteration.
    out.push_back(counted_element(x, min, max.value_or(kUnboundedRepeat), owner));
    return {};
  }
  for (uint32_t i = 0; i < min; ++i) out.push_back(x);
  if (!max) {
    // x* as R ::= x R | "": the recursion is in tail position, which the
    // matcher runs without growing its stack.
    const auto id = static_cast<uint32_t>(names_.size());
    const std::string name = fmt::format("{}#{}", owner, ++n_helpers_);
    rule_ref(name, "");
    n_elements_ += 4;
    definitions_[id] = Alternatives{{x, rule_element(id)}, {}};
    out.push_back(rule_element(id));
    return {};
  }
  const uint32_t optional = *max - min;
  if (room && optional >= 2 && optional <= kMaxRepeatCount) {
    out.push_back(counted_element(x, 0, optional, owner));
    return {};
  }
  if (optional > 0) out.push_back(unrolled_optional(x, optional, owner));
  return {};
}

Element GrammarBuilder::counted_element(Element x, uint32_t min, uint32_t max,
                                        std::string_view owner) {
  // The body as a rule (the counter's iterations expand a rule).
  const uint32_t body = x.kind == ElementKind::kElementRule ? x.value : helper(owner, {{x}});
  const Element e{ElementKind::kElementRepeat, static_cast<uint32_t>(repeats_.size())};
  repeats_.push_back({body, min, max});
  repeat_owners_.emplace_back(owner);
  n_elements_ += 1;
  return e;
}

Element GrammarBuilder::unrolled_optional(Element x, uint32_t k, std::string_view owner) {
  // R_1 ::= x | "", R_k ::= x R_{k-1} | "".
  std::optional<Element> optional;
  for (uint32_t i = 0; i < k; ++i) {
    Sequence first = {x};
    if (optional) first.push_back(*optional);
    optional = rule_element(helper(owner, Alternatives{std::move(first), {}}));
  }
  return *optional;
}

Status GrammarBuilder::check_left_recursion(const std::vector<bool>& nullable) const {
  // Rule a -> rule b when b can be expanded before a has matched any byte.
  const size_t n = names_.size();
  std::vector<std::vector<uint32_t>> first_refs(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& s : *definitions_[r]) {
      for (const Element& e : s) {
        if (e.kind == ElementKind::kElementBytes) break;
        if (e.kind == ElementKind::kElementRepeat) {
          const Repeat& rep = repeats_[e.value];
          first_refs[r].push_back(rep.rule);
          if (rep.min == 0 || nullable[rep.rule]) continue;  // may match nothing: go on
          break;
        }
        first_refs[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
  }
  enum : uint8_t { kWhite, kGrey, kBlack };
  std::vector<uint8_t> color(n, kWhite);
  std::vector<uint32_t> path;
  // Iterative DFS: a deep chain of rules must not overflow the C++ stack.
  for (uint32_t start = 0; start < n; ++start) {
    if (color[start] != kWhite) continue;
    std::vector<std::pair<uint32_t, size_t>> stack = {{start, 0}};
    color[start] = kGrey;
    while (!stack.empty()) {
      auto& [rule, next] = stack.back();
      if (next == first_refs[rule].size()) {
        color[rule] = kBlack;
        stack.pop_back();
        continue;
      }
      const uint32_t to = first_refs[rule][next++];
      if (color[to] == kGrey) {
        std::string cycle;
        bool on = false;
        for (const auto& [r, unused] : stack) {
          on = on || r == to;
          if (on) cycle += names_[r] + " -> ";
        }
        return errorf(
            "rule '{}' is left-recursive ({}{}); the matcher needs every recursion "
            "to consume a byte first",
            names_[to], cycle, names_[to]);
      }
      if (color[to] == kWhite) {
        color[to] = kGrey;
        stack.emplace_back(to, 0);
      }
    }
  }
  return {};
}

Result<Grammar> GrammarBuilder::finish(std::string_view root) && {
  for (size_t r = 0; r < names_.size(); ++r) {
    if (!definitions_[r]) {
      return errorf("rule '{}' is used ({}) but never defined", names_[r], first_use_[r]);
    }
  }
  const auto root_it = ids_.find(root);
  if (root_it == ids_.end()) return errorf("the grammar has no rule '{}'", root);
  if (n_elements_ > limits_.max_elements) {
    return errorf("the grammar is too large ({} elements, limit {})", n_elements_,
                  limits_.max_elements);
  }

  std::vector<bool> nullable(names_.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < names_.size(); ++r) {
      if (nullable[r]) continue;
      for (const Sequence& s : *definitions_[r]) {
        bool all = true;
        for (const Element& e : s) {
          all = all && ((e.kind == ElementKind::kElementRepeat &&
                         (repeats_[e.value].min == 0 || nullable[repeats_[e.value].rule])) ||
                        (e.kind == ElementKind::kElementRule && nullable[e.value]));
        }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  if (Status s = check_left_recursion(nullable); !s.ok()) return s.error();
  // A counter needs every iteration to consume a byte (grammar.h); a body
  // that may match nothing is unrolled into helper rules instead. x{m,k}
  // of such a body matches what x{0,k} does (the missing iterations match
  // nothing); x{m,} of it would be a left-recursive x*.
  std::vector<std::optional<Element>> unrolled(repeats_.size());
  for (size_t i = 0; i < repeats_.size(); ++i) {
    if (!nullable[repeats_[i].rule]) continue;
    if (repeats_[i].max == kUnboundedRepeat) {
      return errorf(
          "rule '{}': a repetition {{{},}} of something that may match nothing; the matcher "
          "needs every repetition to consume a byte",
          repeat_owners_[i], repeats_[i].min);
    }
    unrolled[i] =
        unrolled_optional(rule_element(repeats_[i].rule), repeats_[i].max, repeat_owners_[i]);
  }
  if (n_elements_ > limits_.max_elements || n_elements_ >= kCounterTag) {
    return errorf("the grammar is too large ({} elements, limit {})", n_elements_,
                  limits_.max_elements);
  }

  Grammar g;
  g.root = root_it->second;
  g.byte_sets = std::move(byte_sets_);
  g.repeats = std::move(repeats_);
  g.rules.resize(names_.size());
  for (size_t r = 0; r < names_.size(); ++r) {
    g.rules[r].name = names_[r];
    for (const Sequence& s : *definitions_[r]) {
      g.rules[r].alternatives.push_back(static_cast<uint32_t>(g.elements.size()));
      for (const Element& e : s) {
        const bool lowered = e.kind == ElementKind::kElementRepeat && unrolled[e.value];
        g.elements.push_back(lowered ? *unrolled[e.value] : e);
      }
      g.elements.push_back(Element{});
    }
  }
  return g;
}

}  // namespace specstack::grammar

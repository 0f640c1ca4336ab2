#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace specstack::grammar {

namespace {

uint64_t hash_stack(const std::vector<uint32_t>& stack) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ stack.size();
  for (uint32_t v : stack) h = (h ^ v) * 0x100000001B3ull;
  return h;
}

void push_unique(const std::vector<uint32_t>& stack, StackSet& out) {
  // Sets stay small (a handful of stacks, a few dozen inside "any value"):
  // a linear scan over hashes, the stacks compared only on a hash match.
  const uint64_t h = hash_stack(stack);
  for (size_t i = 0; i < out.size(); ++i) {
    if (out.hashes[i] != h) continue;
    const uint32_t b = out.begin(i);
    if (out.ends[i] - b == stack.size() &&
        std::equal(stack.begin(), stack.end(), out.data.begin() + b)) {
      return;
    }
  }
  out.data.insert(out.data.end(), stack.begin(), stack.end());
  out.ends.push_back(static_cast<uint32_t>(out.data.size()));
  out.hashes.push_back(h);
}

// Expands the top of `stack` until it is a byte set (or the stack is empty)
// on every path, adding the results to `out`. `stack` is restored on return.
// Terminates because the builder rejects left recursion.
void expand(const Grammar& g, std::vector<uint32_t>& stack, StackSet& out) {
  if (stack.empty()) {
    push_unique(stack, out);
    return;
  }
  if (stack.size() > kMaxStackDepth) return;
  const uint32_t pos = stack.back();
  if (is_counter(pos)) {
    // A counted repetition between iterations: stop here (return below
    // it) where the count allows, and begin one more iteration where it
    // allows (grammar.h; the split's class counts never run out).
    const uint32_t repeat = counter_repeat(pos);
    const Repeat& r = g.repeats[repeat];
    const uint32_t count = counter_count(pos);
    stack.pop_back();
    if (counter_may_stop(r, count)) expand(g, stack, out);
    if (counter_may_iterate(r, count)) {
      stack.push_back(counter_entry(repeat, counter_next(r, count)));
      for (uint32_t alt : g.rules[r.rule].alternatives) {
        stack.push_back(alt);
        expand(g, stack, out);
        stack.pop_back();
      }
      stack.pop_back();
    }
    stack.push_back(pos);
    return;
  }
  const Element& e = g.elements[pos];
  switch (e.kind) {
    case ElementKind::kElementBytes:
      push_unique(stack, out);
      return;
    case ElementKind::kElementEnd:
      stack.pop_back();
      expand(g, stack, out);
      stack.push_back(pos);
      return;
    case ElementKind::kElementRepeat: {
      // As a rule reference, with the counter in place of the rule's
      // alternatives; the counter expands to its choices.
      stack.pop_back();
      const bool returns = g.elements[pos + 1].kind != ElementKind::kElementEnd;
      if (returns) stack.push_back(pos + 1);
      stack.push_back(counter_entry(e.value, 0));
      expand(g, stack, out);
      stack.pop_back();
      if (returns) stack.pop_back();
      stack.push_back(pos);
      return;
    }
    case ElementKind::kElementRule: {
      stack.pop_back();
      const bool returns = g.elements[pos + 1].kind != ElementKind::kElementEnd;
      if (returns) stack.push_back(pos + 1);
      for (uint32_t alt : g.rules[e.value].alternatives) {
        stack.push_back(alt);
        expand(g, stack, out);
        stack.pop_back();
      }
      if (returns) stack.pop_back();
      stack.push_back(pos);
      return;
    }
  }
}

}  // namespace

std::string StackSet::key() const {
  // Stacks in lexicographic order of their entries; each prefixed by its
  // length so that different sets never share a key.
  uint32_t order[16];
  std::vector<uint32_t> big;
  uint32_t* idx = order;
  if (size() > std::size(order)) {
    big.resize(size());
    idx = big.data();
  }
  for (uint32_t i = 0; i < size(); ++i) idx[i] = i;
  std::sort(idx, idx + size(), [&](uint32_t a, uint32_t b) {
    return std::lexicographical_compare(data.begin() + begin(a), data.begin() + ends[a],
                                        data.begin() + begin(b), data.begin() + ends[b]);
  });
  std::string out;
  out.reserve((data.size() + size()) * sizeof(uint32_t));
  for (size_t k = 0; k < size(); ++k) {
    const uint32_t i = idx[k];
    const uint32_t n = ends[i] - begin(i);
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.append(reinterpret_cast<const char*>(data.data() + begin(i)), n * sizeof(uint32_t));
  }
  return out;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  const Grammar& g = *grammar_;
  for (uint32_t alt : g.rules[g.root].alternatives) {
    scratch_.assign(1, alt);
    expand(g, scratch_, stacks_);
  }
}

void GrammarMatcher::advance(const Grammar& g, const StackSet& in, uint8_t byte, StackSet& out,
                             std::vector<uint32_t>& scratch) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t b = in.begin(i);
    const uint32_t e = in.ends[i];
    if (b == e) continue;  // ended: nothing may follow on this path
    const uint32_t top = in.data[e - 1];
    if (!g.byte_sets[g.elements[top].value].test(byte)) continue;
    scratch.assign(in.data.begin() + b, in.data.begin() + e);
    scratch.back() = top + 1;
    expand(g, scratch, out);
  }
}

ByteSet GrammarMatcher::next_bytes(const Grammar& g, const StackSet& in) {
  ByteSet out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in.begin(i) == in.ends[i]) continue;
    out |= g.byte_sets[g.elements[in.data[in.ends[i] - 1]].value];
  }
  return out;
}

bool GrammarMatcher::accept_byte(uint8_t byte) {
  advance(*grammar_, stacks_, byte, next_, scratch_);
  if (next_.empty()) return false;
  std::swap(stacks_, next_);
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  StackSet saved = stacks_;
  for (char c : bytes) {
    if (!accept_byte(static_cast<uint8_t>(c))) {
      stacks_ = std::move(saved);
      return false;
    }
  }
  return true;
}

bool GrammarMatcher::can_end() const {
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (stacks_.begin(i) == stacks_.ends[i]) return true;
  }
  return false;
}

bool GrammarMatcher::must_end() const {
  return can_end() && next_bytes().none();
}

ByteSet GrammarMatcher::next_bytes() const {
  return next_bytes(*grammar_, stacks_);
}

}  // namespace specstack::grammar

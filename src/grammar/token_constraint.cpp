#include "grammar/token_constraint.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace specstack::grammar {

namespace {

// Bounds the cache's memory (16-19 KiB per mask at 128-152K vocabularies,
// so at most ~19 MiB per grammar): the schemas of the tests and benchmark
// use a few hundred states; a grammar with more starts over when it fills.
constexpr size_t kMaxCachedMasks = 1024;

}  // namespace

int64_t TokenMask::count() const {
  int64_t n = 0;
  for (uint64_t w : words) n += std::popcount(w);
  return n;
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenVocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {}

TokenConstraintStats TokenConstraint::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::shared_ptr<const TokenMask> TokenConstraint::mask(const StackSet& state) {
  std::string key = state.key();
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.mask_requests;
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  std::shared_ptr<const TokenMask> mask = walk(state);
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  cache_.emplace(std::move(key), mask);
  return mask;
}

std::shared_ptr<TokenMask> TokenConstraint::walk(const StackSet& state) {
  ++stats_.mask_walks;
  const Grammar& g = *grammar_;
  const TokenVocabulary& v = *vocabulary_;
  const std::vector<TrieNode>& nodes = v.nodes();
  const std::vector<int32_t>& ids = v.token_ids();
  auto mask = std::make_shared<TokenMask>();
  mask->words.assign((static_cast<size_t>(v.size()) + 63) / 64, 0);

  // states_[d]: the state after the first d bytes of the current path;
  // allowed[d]: the bytes it admits (a cheap test before a full advance).
  states_.resize(v.max_depth() + 1);
  std::vector<ByteSet> allowed(v.max_depth() + 1);
  states_[0] = state;
  allowed[0] = GrammarMatcher::next_bytes(g, state);
  int64_t visited = 0;
  for (uint32_t i = 1; i < nodes.size();) {
    const TrieNode& node = nodes[i];
    const size_t d = node.depth;
    ++visited;
    if (!allowed[d - 1].test(node.byte)) {
      i = node.subtree_end;
      continue;
    }
    GrammarMatcher::advance(g, states_[d - 1], node.byte, states_[d], scratch_);
    if (states_[d].empty()) {
      i = node.subtree_end;
      continue;
    }
    for (uint32_t t = node.tokens_begin; t < node.tokens_end; ++t) mask->set(ids[t]);
    if (node.subtree_end > i + 1) allowed[d] = GrammarMatcher::next_bytes(g, states_[d]);
    ++i;
  }
  stats_.nodes_visited += visited;
  return mask;
}

TokenMatcher::TokenMatcher(std::shared_ptr<TokenConstraint> constraint)
    : constraint_(std::move(constraint)), matcher_(constraint_->grammar()) {}

const TokenMask& TokenMatcher::mask() {
  if (!mask_) mask_ = constraint_->mask(matcher_.stacks());
  return *mask_;
}

void TokenMatcher::apply(std::span<float> logits, std::span<const int32_t> eos_ids) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  const TokenMask& m = mask();
  const bool end_ok = matcher_.can_end();
  // Keep the EOS logits aside: they are masked with the rest and restored
  // only where the document may end.
  std::vector<std::pair<int32_t, float>> eos;
  if (end_ok) {
    for (int32_t id : eos_ids) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) eos.emplace_back(id, logits[id]);
    }
  }
  // Whole words at a time: masks are mostly all-ones (inside a string) or
  // all-zeros (between JSON tokens), so only mixed words go bit by bit.
  const size_t n = logits.size();
  float* row = logits.data();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = w < m.words.size() ? m.words[w] : 0;
    const size_t begin = w * 64;
    const size_t end = std::min(n, begin + 64);
    if (bits == ~uint64_t{0} && end - begin == 64) continue;
    if (bits == 0) {
      std::fill(row + begin, row + end, kMinusInf);
      continue;
    }
    for (size_t i = begin; i < end; ++i) {
      if (((bits >> (i - begin)) & 1) == 0) row[i] = kMinusInf;
    }
  }
  for (const auto& [id, value] : eos) logits[size_t(id)] = value;
}

bool TokenMatcher::accept(int32_t token, std::span<const int32_t> eos_ids) {
  if (std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end()) return can_end();
  if (token < 0 || token >= constraint_->vocabulary().size()) return false;
  const std::string& bytes = constraint_->vocabulary().bytes(token);
  if (bytes.empty() || !mask().test(token)) return false;
  if (!matcher_.accept_bytes(bytes)) return false;
  mask_.reset();
  return true;
}

}  // namespace specstack::grammar

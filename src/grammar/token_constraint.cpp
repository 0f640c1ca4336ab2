#include "grammar/token_constraint.h"

#include <algorithm>
#include <limits>

namespace specstack::grammar {

namespace {

// Bounds the cache's memory (16-19 KiB per mask at 128-152K vocabularies,
// so at most ~19 MiB per grammar): the schemas of the tests and benchmark
// use a few hundred states; a grammar with more starts over when it fills.
constexpr size_t kMaxCachedMasks = 1024;

}  // namespace

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenVocabulary> vocabulary,
                                 TokenConstraintOptions options)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), options_(options) {}

size_t TokenConstraint::precompute_positions() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (uint32_t pos = 0; pos < grammar_->elements.size(); ++pos) {
    if (grammar_->elements[pos].kind != ElementKind::kElementBytes) continue;
    position(pos);
    ++n;
  }
  return n;
}

const PositionMasks& TokenConstraint::position(uint32_t pos) {
  auto it = positions_.find(pos);
  if (it == positions_.end()) {
    auto masks = std::make_unique<const PositionMasks>(
        classify_position(*grammar_, *vocabulary_, pos, scratch_));
    ++stats_.positions_classified;
    stats_.nodes_visited += masks->nodes_visited;
    it = positions_.emplace(pos, std::move(masks)).first;
  }
  return *it->second;
}

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

std::shared_ptr<const TokenMask> TokenConstraint::side_mask(
    const std::string& key, const std::function<TokenMask()>& compute) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = side_masks_.find(key); it != side_masks_.end()) return it->second;
  auto mask = std::make_shared<const TokenMask>(compute());
  side_masks_.emplace(key, mask);
  return mask;
}

std::shared_ptr<TokenMask> TokenConstraint::walk(const StackSet& state) {
  ++stats_.mask_walks;
  if (options_.context_independent) {
    if (std::shared_ptr<TokenMask> mask = split_mask(state)) return mask;
  }
  auto mask = std::make_shared<TokenMask>();
  mask->words.assign((static_cast<size_t>(vocabulary_->size()) + 63) / 64, 0);
  stats_.nodes_visited += walk_trie(*grammar_, vocabulary_->trie(), state, *mask, scratch_);
  return mask;
}

std::shared_ptr<TokenMask> TokenConstraint::split_mask(const StackSet& state) {
  const Grammar& g = *grammar_;
  // Stacks by their top (ended stacks admit no token).
  std::vector<std::pair<uint32_t, uint32_t>> tops;  // (top, stack index)
  for (uint32_t i = 0; i < state.size(); ++i) {
    if (state.begin(i) == state.ends[i]) continue;
    tops.emplace_back(state.data[state.ends[i] - 1], i);
  }
  std::sort(tops.begin(), tops.end());
  for (const auto& [top, i] : tops) {
    // Too deep for the split to be exact (a path might hit the depth
    // bound that the one-entry classification never saw): the plain walk.
    const size_t depth = state.ends[i] - state.begin(i);
    if (depth + position(top).max_growth + g.rules.size() + 1 > kMaxStackDepth) return nullptr;
  }
  auto mask = std::make_shared<TokenMask>();
  mask->words.assign((static_cast<size_t>(vocabulary_->size()) + 63) / 64, 0);
  for (size_t a = 0; a < tops.size();) {
    size_t b = a;
    while (b < tops.size() && tops[b].first == tops[a].first) ++b;
    const PositionMasks& p = position(tops[a].first);
    for (size_t w = 0; w < mask->words.size(); ++w) mask->words[w] |= p.accepted.words[w];
    if (!p.context_dependent.empty()) {
      group_.clear();
      for (size_t k = a; k < b; ++k) {
        const uint32_t i = tops[k].second;
        group_.data.insert(group_.data.end(), state.data.begin() + state.begin(i),
                           state.data.begin() + state.ends[i]);
        group_.ends.push_back(static_cast<uint32_t>(group_.data.size()));
        group_.hashes.push_back(state.hashes[i]);
      }
      stats_.nodes_visited += walk_trie(g, p.context_dependent, group_, *mask, scratch_);
    }
    a = b;
  }
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

bool TokenMatcher::accept_bytes(std::string_view bytes) {
  if (!matcher_.accept_bytes(bytes)) return false;
  mask_.reset();
  return true;
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

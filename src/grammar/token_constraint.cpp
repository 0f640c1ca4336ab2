#include "grammar/token_constraint.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace specstack::grammar {

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenVocabulary> vocabulary,
                                 TokenConstraintOptions options)
    : grammar_(std::move(grammar)),
      vocabulary_(std::move(vocabulary)),
      cache_(options.mask_cache_bytes),
      options_(options) {}

const PositionMasks& TokenConstraint::position(std::span<const uint32_t> suffix,
                                               size_t longer_than) {
  // Class-count suffixes (longer_than 0) and real-count ones never share a
  // key: a class count is no real count (grammar.h).
  std::string key(reinterpret_cast<const char*>(suffix.data()), suffix.size_bytes());
  auto it = positions_.find(key);
  if (it == positions_.end()) {
    auto masks = std::make_unique<const PositionMasks>(
        classify_position(*grammar_, *vocabulary_, suffix, scratch_, longer_than));
    ++(longer_than > 0 ? stats_.count_positions_classified : stats_.positions_classified);
    stats_.nodes_visited += masks->nodes_visited;
    it = positions_.emplace(std::move(key), std::move(masks)).first;
  }
  return *it->second;
}

const TokenMask& TokenConstraint::up_to_length(size_t n) {
  auto it = up_to_length_.find(n);
  if (it != up_to_length_.end()) return it->second;
  TokenMask m;
  m.words.assign((static_cast<size_t>(vocabulary_->size()) + 63) / 64, ~uint64_t{0});
  for (int32_t id : vocabulary_->longer_than(n)) {
    m.words[size_t(id) / 64] &= ~(uint64_t{1} << (size_t(id) % 64));
  }
  return up_to_length_.emplace(n, std::move(m)).first->second;
}

size_t TokenConstraint::precompute(const PrecomputeOptions& options) {
  if (!options_.context_independent) return 0;
  const std::vector<std::vector<uint32_t>> tops =
      reachable_tops(*grammar_, std::max<size_t>(options_.context_depth, 1), options.limits);
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t before = stats_.positions_classified;
  const int64_t budget_end = stats_.nodes_visited + options.max_nodes;
  std::vector<uint32_t> bounded;
  for (const std::vector<uint32_t>& top : tops) {
    if (stats_.nodes_visited >= budget_end) break;
    position(top);
    // A top with one counter: its classification for the tokens longer than
    // the class count holds for, at each real count of that class for which
    // that is shorter than the longest token (split_mask's second part):
    // below the minimum, the counts within a token's length of it; at or
    // past it, those within a token's length of the maximum. Several
    // counters in one top (nested repetitions) are left to first use.
    size_t counters = 0, at = 0;
    for (size_t i = 0; i < top.size(); ++i) {
      if (is_counter(top[i])) ++counters, at = i;
    }
    if (counters != 1 || !options.counts) continue;
    const uint32_t repeat = counter_repeat(top[at]);
    const Repeat& r = grammar_->repeats[repeat];
    const uint32_t longest = static_cast<uint32_t>(vocabulary_->max_depth());
    uint32_t first = 0, last = 0;  // real counts [first, last]
    if (counter_count(top[at]) == kMustGoCount) {
      if (r.min == 0) continue;
      first = r.min >= longest ? r.min - longest + 1 : 1;
      last = r.min - 1;
    } else {
      if (r.max == kUnboundedRepeat) continue;
      first = std::max({r.min, 1u, r.max >= longest ? r.max - longest + 1 : 1});
      last = r.max;
    }
    bounded = top;
    for (uint32_t count = first; count <= last && stats_.nodes_visited < budget_end; ++count) {
      bounded[at] = counter_entry(repeat, count);
      position(bounded, counter_exact_up_to(r, count));
    }
  }
  return static_cast<size_t>(stats_.positions_classified - before);
}

TokenConstraintStats TokenConstraint::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  TokenConstraintStats out = stats_;
  out.mask_evictions = cache_.stats().evictions;
  out.cached_masks = cache_.stats().entries;
  out.cached_mask_bytes = cache_.stats().bytes;
  return out;
}

std::string TokenConstraint::cache_key(const StackSet& state) const {
  if (!options_.class_count_keys) return state.key();
  const auto longest = static_cast<uint32_t>(vocabulary_->max_depth());
  StackSet canonical;  // made only when some counter is far from its bounds
  for (size_t i = 0; i < state.data.size(); ++i) {
    const uint32_t entry = state.data[i];
    if (!is_counter(entry) || is_class_count(counter_count(entry))) continue;
    const Repeat& r = grammar_->repeats[counter_repeat(entry)];
    if (counter_exact_up_to(r, counter_count(entry)) < longest) continue;
    if (canonical.empty()) {
      canonical.data = state.data;
      canonical.ends = state.ends;
    }
    canonical.data[i] =
        counter_entry(counter_repeat(entry), counter_class(r, counter_count(entry)));
  }
  return canonical.empty() ? state.key() : canonical.key();
}

std::shared_ptr<const TokenMask> TokenConstraint::mask(const StackSet& state) {
  std::string key = cache_key(state);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.mask_requests;
  if (std::shared_ptr<const TokenMask> hit = cache_.find(key)) return hit;
  uint64_t cost = 0;
  std::shared_ptr<const TokenMask> mask = walk(state, cost);
  cache_.insert(std::move(key), mask, cost);
  return mask;
}

std::shared_ptr<const TokenMask> TokenConstraint::cached_mask(const StackSet& state) {
  const std::string key = cache_key(state);
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.find(key);
}

std::shared_ptr<const TokenMask> TokenConstraint::side_mask(
    const std::string& key, const std::function<TokenMask()>& compute) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = side_masks_.find(key); it != side_masks_.end()) return it->second;
  auto mask = std::make_shared<const TokenMask>(compute());
  side_masks_.emplace(key, mask);
  return mask;
}

std::shared_ptr<TokenMask> TokenConstraint::walk(const StackSet& state, uint64_t& cost) {
  ++stats_.mask_walks;
  cost = 1;
  if (options_.context_independent) {
    if (std::shared_ptr<TokenMask> mask = split_mask(state, cost)) return mask;
  }
  auto mask = std::make_shared<TokenMask>();
  mask->words.assign((static_cast<size_t>(vocabulary_->size()) + 63) / 64, 0);
  const int64_t nodes = walk_trie(*grammar_, vocabulary_->trie(), state, *mask, scratch_);
  stats_.nodes_visited += nodes;
  cost += static_cast<uint64_t>(nodes);
  return mask;
}

std::shared_ptr<TokenMask> TokenConstraint::split_mask(const StackSet& state, uint64_t& cost) {
  const Grammar& g = *grammar_;
  // Stacks by their top entries (ended stacks admit no token).
  const size_t k = std::max<size_t>(options_.context_depth, 1);
  struct Top {
    std::span<const uint32_t> suffix;
    uint32_t stack;
  };
  std::vector<Top> tops;
  for (uint32_t i = 0; i < state.size(); ++i) {
    const uint32_t b = state.begin(i), e = state.ends[i];
    if (b == e) continue;
    const uint32_t n = std::min<uint32_t>(e - b, static_cast<uint32_t>(k));
    tops.push_back({std::span<const uint32_t>(state.data.data() + e - n, n), i});
  }
  std::sort(tops.begin(), tops.end(), [](const Top& x, const Top& y) {
    return std::lexicographical_compare(x.suffix.begin(), x.suffix.end(), y.suffix.begin(),
                                        y.suffix.end());
  });
  auto same = [](const Top& x, const Top& y) {
    return std::equal(x.suffix.begin(), x.suffix.end(), y.suffix.begin(), y.suffix.end());
  };
  // A suffix's classification has its counters at their class counts
  // (grammar.h); `fewest` is the longest token that classification holds
  // for with the real counts: longer tokens are decided by the real
  // suffix's own classification or by walking them with the real stacks.
  std::vector<uint32_t> unbounded;
  bool near_minimum = false;  // `fewest` is a counter's distance to its minimum
  auto classified = [&](std::span<const uint32_t> suffix,
                        uint32_t& fewest) -> const PositionMasks& {
    unbounded.assign(suffix.begin(), suffix.end());
    fewest = kEveryLength;
    near_minimum = false;
    for (uint32_t& entry : unbounded) {
      if (!is_counter(entry)) continue;
      const Repeat& r = g.repeats[counter_repeat(entry)];
      const uint32_t up_to = counter_exact_up_to(r, counter_count(entry));
      if (up_to < fewest) {
        fewest = up_to;
        near_minimum = counter_count(entry) < r.min;
      }
      entry = counter_entry(counter_repeat(entry), counter_class(r, counter_count(entry)));
    }
    return position(unbounded);
  };
  for (const Top& top : tops) {
    // Too deep for the split to be exact (a path might hit the depth
    // bound that the classification never saw): the plain walk.
    const size_t depth = state.ends[top.stack] - state.begin(top.stack);
    uint32_t fewest = 0;
    if (depth + classified(top.suffix, fewest).max_growth + g.rules.size() + 1 > kMaxStackDepth) {
      return nullptr;
    }
  }
  const size_t n_words = (static_cast<size_t>(vocabulary_->size()) + 63) / 64;
  auto mask = std::make_shared<TokenMask>();
  mask->words.assign(n_words, 0);
  for (size_t a = 0; a < tops.size();) {
    size_t b = a;
    while (b < tops.size() && same(tops[b], tops[a])) ++b;
    uint32_t fewest = 0;
    const PositionMasks& p = classified(tops[a].suffix, fewest);
    const bool bounded = fewest < vocabulary_->max_depth();
    // The class-count classification holds for tokens of at most `fewest`
    // bytes; the longer ones have the real suffix's own classification,
    // restricted to them, or are walked with the real stacks. Near a
    // minimum the classification is made now and kept: a long string's
    // last characters before its minimum recur in every document, and the
    // per-state mask cache turns over on such strings. Near a maximum
    // (short strings, whitespace and digit runs) walking the longer tokens
    // per state is cheaper, unless PrecomputeOptions::counts classified
    // them at compile time.
    const PositionMasks* longer = nullptr;
    if (bounded && near_minimum) {
      longer = &position(tops[a].suffix, fewest);
    } else if (bounded) {
      const std::string key(reinterpret_cast<const char*>(tops[a].suffix.data()),
                            tops[a].suffix.size_bytes());
      if (auto it = positions_.find(key); it != positions_.end()) longer = it->second.get();
    }
    cost += n_words / 64;  // the merges below, about one node's work per 64 words
    if (bounded) {
      const TokenMask& short_tokens = up_to_length(fewest);
      for (size_t w = 0; w < n_words; ++w) {
        mask->words[w] |= p.accepted.words[w] & short_tokens.words[w];
      }
      if (longer) {
        for (size_t w = 0; w < n_words; ++w) mask->words[w] |= longer->accepted.words[w];
      }
    } else {
      for (size_t w = 0; w < n_words; ++w) mask->words[w] |= p.accepted.words[w];
    }
    const bool walk_longer = bounded && !longer;
    if (!p.context_dependent.empty() || walk_longer ||
        (longer && !longer->context_dependent.empty())) {
      group_.clear();
      for (size_t t = a; t < b; ++t) {
        const uint32_t i = tops[t].stack;
        group_.data.insert(group_.data.end(), state.data.begin() + state.begin(i),
                           state.data.begin() + state.ends[i]);
        group_.ends.push_back(static_cast<uint32_t>(group_.data.size()));
        group_.hashes.push_back(state.hashes[i]);
      }
      int64_t nodes = 0;
      if (!p.context_dependent.empty()) {
        nodes += walk_trie(g, p.context_dependent, group_, *mask, scratch_);
      }
      if (longer && !longer->context_dependent.empty()) {
        nodes += walk_trie(g, longer->context_dependent, group_, *mask, scratch_);
      }
      if (walk_longer) {
        nodes += walk_trie(g, vocabulary_->trie(), group_, *mask, scratch_, fewest);
      }
      stats_.nodes_visited += nodes;
      cost += static_cast<uint64_t>(nodes);
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
  // all-zeros (between JSON tokens). A mixed word visits only its refused
  // bits: inside a string most words hold a few refused tokens (quotes,
  // control bytes), and testing all 64 bits of each was most of a warm
  // token's cost (docs/benchmarks.md, session 24: mask cache eviction).
  const size_t n = logits.size();
  float* row = logits.data();
  for (size_t w = 0; w * 64 < n; ++w) {
    const size_t begin = w * 64;
    const size_t width = std::min<size_t>(n - begin, 64);
    const uint64_t in_row = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
    uint64_t refused = ~(w < m.words.size() ? m.words[w] : 0) & in_row;
    if (refused == 0) continue;
    if (refused == in_row) {
      std::fill(row + begin, row + begin + width, kMinusInf);
      continue;
    }
    for (; refused != 0; refused &= refused - 1) row[begin + std::countr_zero(refused)] = kMinusInf;
  }
  for (const auto& [id, value] : eos) logits[size_t(id)] = value;
}

void TokenMatcher::fill_bitmask(std::span<uint32_t> bits, std::span<const int32_t> eos_ids) {
  write_bitmask(mask(), bits, eos_ids);
}

bool TokenMatcher::fill_known_bitmask(std::span<uint32_t> bits, std::span<const int32_t> eos_ids) {
  if (!mask_) mask_ = constraint_->cached_mask(matcher_.stacks());
  if (!mask_) return false;
  write_bitmask(*mask_, bits, eos_ids);
  return true;
}

void TokenMatcher::write_bitmask(const TokenMask& m, std::span<uint32_t> bits,
                                 std::span<const int32_t> eos_ids) const {
  // TokenMask's 64-bit word w holds ids [64 w, 64 w + 64): its low half
  // first, as in little-endian memory.
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint64_t word = i / 2 < m.words.size() ? m.words[i / 2] : 0;
    bits[i] = static_cast<uint32_t>(i % 2 == 0 ? word : word >> 32);
  }
  if (!matcher_.can_end()) return;
  for (int32_t id : eos_ids) {
    if (id >= 0 && static_cast<size_t>(id) / 32 < bits.size())
      bits[size_t(id) / 32] |= 1u << (id % 32);
  }
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
  // A token is in its state's mask exactly when its bytes advance the
  // state (the trie walk's test), so the byte walk decides alone; the mask
  // answers first only when it is already made. Making it here would put a
  // mask lookup (~10-40 us) on the path of every token accepted without
  // one: the tokens after the first of a verified speculative run.
  if (bytes.empty() || (mask_ != nullptr && !mask_->test(token))) return false;
  if (!matcher_.accept_bytes(bytes)) return false;
  mask_.reset();
  return true;
}

}  // namespace specstack::grammar

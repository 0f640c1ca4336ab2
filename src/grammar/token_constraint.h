// Grammar-constrained decoding over a tokenizer's vocabulary.
//
// TokenConstraint (one per grammar and vocabulary, shared by every sequence
// that decodes with it) computes which tokens a parser state admits: it walks
// the vocabulary trie with the state, advancing byte by byte and pruning a
// subtree at its first rejected byte. The mask depends only on the state, and
// a JSON document revisits few distinct states (inside a string every
// character leaves the same stacks), so masks are cached per state: the walk
// runs once per distinct state, later visits are a hash lookup. The cache is
// bounded in bytes and keeps the masks that are expensive to make again and
// recently used (grammar/mask_cache.h).
//
// The walk itself is split as XGrammar does (grammar/trie_walk.h): per
// stack top (its last TokenConstraintOptions::context_depth entries), the
// tokens whose acceptance does not depend on the stack below are classified
// once, on first use; a state's mask is then the union, over its stacks, of
// their tops' accepted sets plus a walk of only the context-dependent tokens
// with the real stacks. Counted repetitions are classified once per count
// class (below the minimum / at or past it) for the tokens no longer than
// the distance to the bound, and once per count for the longer ones (few
// until the count is nearly at a bound).
//
// TokenMatcher (one per sequence) holds the parser state, masks logits and
// accepts the sampled token.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/mask_cache.h"
#include "grammar/matcher.h"
#include "grammar/reachable_tops.h"
#include "grammar/token_vocabulary.h"
#include "grammar/trie_walk.h"

namespace specstack::grammar {

struct TokenConstraintStats {
  int64_t mask_requests = 0;
  int64_t mask_walks = 0;            // cache misses (trie walks)
  int64_t mask_evictions = 0;        // masks the bounded cache let go
  size_t cached_masks = 0;           // now
  size_t cached_mask_bytes = 0;      // now (MaskCache::entry_bytes)
  int64_t nodes_visited = 0;         // over all walks
  int64_t positions_classified = 0;  // context-independent splits computed (class counts)
  // Splits of a suffix with its real counts near a bound, for the tokens
  // longer than its class classification holds for (at compile time with
  // PrecomputeOptions::counts, else on first use).
  int64_t count_positions_classified = 0;
};

struct PrecomputeOptions {
  ReachableTopsLimits limits;
  // Also classify, for every top with one counted repetition and every count
  // it may hold within a token's length of its minimum or maximum, the
  // tokens longer than that distance (else on first use):
  // a lower cold cost per token for a longer compile (docs/benchmarks.md).
  bool counts = false;
  // Trie nodes the classifications may visit in all: a hostile grammar's
  // first request stops here (~3 s of CPU); what is left is classified on
  // first use. The benchmark's schema visits 0.8-0.9M (2.7-3.3M with
  // counts) in 240 ms (1.1 s) at 128-152K vocabularies.
  int64_t max_nodes = 10'000'000;
};

struct TokenConstraintOptions {
  // Split each grammar position's tokens into context-independent ones
  // (accepted or rejected whatever the stack below; computed once per
  // position) and the rest (walked per state), instead of walking the whole
  // vocabulary per state. Off: the plain walk (the benchmark's baseline).
  bool context_independent = true;
  // How many top entries of a stack the split classifies together (see
  // grammar/trie_walk.h): more decides more tokens ahead of time, fewer
  // shares each classification among more states.
  size_t context_depth = 3;
  // The per-state mask cache's bound (grammar/mask_cache.h; masks are
  // 16-19 KiB at 128-152K vocabularies, so ~1,300-1,550 of them): per
  // grammar, and the server keeps up to 16 grammars (GrammarCache). Masks
  // are the same whatever it is; 0 caches none.
  size_t mask_cache_bytes = size_t{24} << 20;
  // Cache masks under a key with every counter that is at least a longest
  // token's length from its bounds at its class count (cache_key below):
  // every character of a long string far from its minimum shares one mask.
  // Off: one entry per real count (the benchmark's comparison).
  bool class_count_keys = true;
};

class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const Grammar> grammar,
                  std::shared_ptr<const TokenVocabulary> vocabulary,
                  TokenConstraintOptions options = {});

  // The tokens whose bytes the state admits (EOS is not in the vocabulary).
  std::shared_ptr<const TokenMask> mask(const StackSet& state);
  // The same only when cached: null where mask() would walk.
  std::shared_ptr<const TokenMask> cached_mask(const StackSet& state);

  // Classifies now the stack tops the grammar can reach
  // (grammar/reachable_tops.h), so that decoding meets them classified:
  // called once when a grammar is compiled (GrammarCache), it moves the
  // split's classification out of the per-token cost. Masks are the same
  // with or without it. Returns the number of tops classified now.
  size_t precompute(const PrecomputeOptions& options = {});

  // Another per-grammar mask kept with this constraint (so it is shared and
  // cached as the state masks are): computed by `compute` on the first ask
  // for `key`. Used for the trigger refusals (grammar/grammar_trigger.h).
  std::shared_ptr<const TokenMask> side_mask(const std::string& key,
                                             const std::function<TokenMask()>& compute);

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  TokenConstraintStats stats() const;

 private:
  // `cost`: what the mask cost to make, for the cache's eviction (trie
  // nodes walked, one per 64 mask words merged; classifications made on
  // first use are kept apart from it and not counted).
  std::shared_ptr<TokenMask> walk(const StackSet& state, uint64_t& cost);
  std::shared_ptr<TokenMask> split_mask(const StackSet& state, uint64_t& cost);
  // The mask cache's key: StackSet::key, with each counter whose class
  // classification is exact for every token (counter_exact_up_to at least
  // the longest token: the count is far from its minimum and maximum) at
  // its class count. Exact: every token's paths are those of the class
  // count (grammar.h), so two states of one key admit the same tokens; only
  // the EOS rule differs, and TokenMatcher takes it from the real state.
  std::string cache_key(const StackSet& state) const;
  // The split for a stack's top entries, classified on first use.
  // With real counters in the suffix: classified for the tokens longer than
  // `longer_than` bytes only.
  const PositionMasks& position(std::span<const uint32_t> suffix, size_t longer_than = 0);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable std::mutex mutex_;  // sequences of several requests may share one constraint
  MaskCache cache_;
  std::unordered_map<std::string, std::shared_ptr<const TokenMask>> side_masks_;
  TokenConstraintStats stats_;
  TokenConstraintOptions options_;
  // By the suffix's entries as bytes.
  std::unordered_map<std::string, std::unique_ptr<const PositionMasks>> positions_;
  WalkScratch scratch_;
  StackSet group_;  // split_mask: the stacks sharing one top
  // Every token of at most n bytes (the others set too: bits outside the
  // vocabulary's trie are never accepted), by n; built on first use, at
  // most one per length below the longest token's.
  const TokenMask& up_to_length(size_t n);
  std::unordered_map<size_t, TokenMask> up_to_length_;
};

class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<TokenConstraint> constraint);

  // Sets every logit outside the mask to -inf; the ids in `eos_ids` keep
  // their logits exactly when the document may end here. Ids at or beyond
  // the vocabulary's size (padding rows of the model) are masked too.
  void apply(std::span<float> logits, std::span<const int32_t> eos_ids);
  // The same rule as a bitmask over bits.size() * 32 ids (bit t % 32 of
  // bits[t / 32] set = token t keeps its logit), for a device that masks
  // the logits itself (model/logit_masks.h): every word is written.
  void fill_bitmask(std::span<uint32_t> bits, std::span<const int32_t> eos_ids);
  // The same only from a mask already made (this state's or the cache's):
  // false, `bits` untouched, where it would take a walk (a speculative
  // draft row then goes unmasked rather than wait for it).
  bool fill_known_bitmask(std::span<uint32_t> bits, std::span<const int32_t> eos_ids);
  // Advances by the token's bytes. An EOS id (listed in `eos_ids`) is
  // accepted only where the document may end. False: rejected, state kept.
  bool accept(int32_t token, std::span<const int32_t> eos_ids);
  // Advances by bytes that are not one token (a trigger and the rest of the
  // token that completed it). False: rejected, state kept.
  bool accept_bytes(std::string_view bytes);
  bool can_end() const { return matcher_.can_end(); }
  bool must_end() const { return matcher_.must_end(); }
  const TokenMask& mask();  // for the current state
  const GrammarMatcher& matcher() const { return matcher_; }

 private:
  void write_bitmask(const TokenMask& m, std::span<uint32_t> bits,
                     std::span<const int32_t> eos_ids) const;

  std::shared_ptr<TokenConstraint> constraint_;
  GrammarMatcher matcher_;
  std::shared_ptr<const TokenMask> mask_;  // of the current state; null until asked
};

}  // namespace specstack::grammar

// Grammar-constrained decoding over a tokenizer's vocabulary.
//
// TokenConstraint (one per grammar and vocabulary, shared by every sequence
// that decodes with it) computes which tokens a parser state admits: it walks
// the vocabulary trie with the state, advancing byte by byte and pruning a
// subtree at its first rejected byte. The mask depends only on the state, and
// a JSON document revisits few distinct states (inside a string every
// character leaves the same stacks), so masks are cached per state: the walk
// runs once per distinct state, later visits are a hash lookup.
//
// TokenMatcher (one per sequence) holds the parser state, masks logits and
// accepts the sampled token.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/token_vocabulary.h"

namespace specstack::grammar {

// One bit per token id.
struct TokenMask {
  std::vector<uint64_t> words;
  bool test(int32_t id) const {
    const auto i = static_cast<size_t>(id);
    return i / 64 < words.size() && ((words[i / 64] >> (i % 64)) & 1) != 0;
  }
  void set(int32_t id) { words[size_t(id) / 64] |= uint64_t{1} << (size_t(id) % 64); }
  int64_t count() const;
};

struct TokenConstraintStats {
  int64_t mask_requests = 0;
  int64_t mask_walks = 0;     // cache misses (trie walks)
  int64_t nodes_visited = 0;  // over all walks
};

class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const Grammar> grammar,
                  std::shared_ptr<const TokenVocabulary> vocabulary);

  // The tokens whose bytes the state admits (EOS is not in the vocabulary).
  std::shared_ptr<const TokenMask> mask(const StackSet& state);

  const std::shared_ptr<const Grammar>& grammar() const { return grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  TokenConstraintStats stats() const;

 private:
  std::shared_ptr<TokenMask> walk(const StackSet& state);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  mutable std::mutex mutex_;  // sequences of several requests may share one constraint
  std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
  TokenConstraintStats stats_;
  // Walk scratch: one state per trie depth.
  std::vector<StackSet> states_;
  std::vector<uint32_t> scratch_;
};

class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<TokenConstraint> constraint);

  // Sets every logit outside the mask to -inf; the ids in `eos_ids` keep
  // their logits exactly when the document may end here. Ids at or beyond
  // the vocabulary's size (padding rows of the model) are masked too.
  void apply(std::span<float> logits, std::span<const int32_t> eos_ids);
  // Advances by the token's bytes. An EOS id (listed in `eos_ids`) is
  // accepted only where the document may end. False: rejected, state kept.
  bool accept(int32_t token, std::span<const int32_t> eos_ids);
  bool can_end() const { return matcher_.can_end(); }
  bool must_end() const { return matcher_.must_end(); }
  const TokenMask& mask();  // for the current state
  const GrammarMatcher& matcher() const { return matcher_; }

 private:
  std::shared_ptr<TokenConstraint> constraint_;
  GrammarMatcher matcher_;
  std::shared_ptr<const TokenMask> mask_;  // of the current state; null until asked
};

}  // namespace specstack::grammar

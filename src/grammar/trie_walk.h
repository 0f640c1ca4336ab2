// The two walks of a token trie with a grammar state behind the token masks
// (grammar/token_constraint.h).
//
// walk_trie: which tokens of a trie a state admits. It advances the state
// byte by byte down the trie, pruning a subtree at its first rejected byte.
//
// classify_position: XGrammar's context-independent split, for the top
// entries of a stack (its top position, a byte-set element, and the return
// addresses just below it: the "suffix"). Walking the vocabulary with the
// suffix alone as the stack sees everything those entries decide: a token
// whose bytes a path consumes without returning below the suffix is accepted
// whatever lies further down on a real stack; a token that every path rejects
// within the suffix is rejected whatever lies below; only a token some path
// consumes only by returning below the suffix (into the unknown entries)
// depends on the stack. Those context-dependent tokens get a trie of their
// own, walked at run time with the real stacks. A token that ends exactly
// where the suffix is used up is accepted: the path stands whatever comes
// next. One entry alone is too little for JSON: inside a string the top
// rule is one character, so every longer token returns from it; with the
// string's repetition and closing quote in the suffix only tokens that run
// past the string depend on the context.
//
// Counted repetitions (grammar.h) are classified with their counters at a
// class count: "may stop, never runs out" or "may not stop yet, never runs
// out". Every iteration consumes a byte, so a token of n bytes meets the
// counter at most n times, and with a real count at least n iterations from
// its minimum (below it) or from its maximum (past the minimum) it has
// exactly the paths its class count has (grammar.h counter_exact_up_to).
// One classification then serves every count of a class (every character
// of a minLength or maxLength string) for the tokens up to that length; the
// longer ones get a classification of the suffix with its real counts
// restricted to them (subtrees with no longer token are skipped, so it is
// small until the count is nearly at a bound).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/token_trie.h"
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

// Reused between walks: one state per trie depth.
struct WalkScratch {
  std::vector<StackSet> states;
  std::vector<ByteSet> allowed;
  std::vector<uint32_t> stack;
};

// Sets in `mask` the bit of every token of `trie` that `state` admits;
// returns the number of trie nodes visited. Subtrees holding no token longer
// than `longer_than` bytes are skipped (their tokens are decided elsewhere);
// the tokens the walk does visit are all decided exactly.
int64_t walk_trie(const Grammar& g, const TokenTrie& trie, const StackSet& state, TokenMask& mask,
                  WalkScratch& scratch, size_t longer_than = 0);

struct PositionMasks {
  TokenMask accepted;           // whatever the stack below
  TokenTrie context_dependent;  // walked with the real stacks
  // The most entries a walk pushed above the starting one: a real stack
  // this much below kMaxStackDepth cannot lose a path to the depth bound,
  // so the split is exact for it.
  size_t max_growth = 0;
  int64_t nodes_visited = 0;
};

// Tokens of at most `longer_than` bytes are left out (neither accepted nor
// context-dependent): a suffix with real counters is classified only for
// the tokens its unbounded classification cannot decide (trie_walk.h top).
PositionMasks classify_position(const Grammar& g, const TokenVocabulary& vocabulary,
                                std::span<const uint32_t> suffix, WalkScratch& scratch,
                                size_t longer_than = 0);

}  // namespace specstack::grammar

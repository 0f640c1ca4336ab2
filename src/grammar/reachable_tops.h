// reachable_tops: the stack tops a grammar's parser can reach, found when the
// grammar is compiled so that the token masks' context-independent split
// (grammar/trie_walk.h) can classify them then, once per grammar, rather than
// on first use inside a request's decoding (XGrammar's compile-time
// preprocessing).
//
// A breadth-first search over parser stacks, byte by byte from the start
// state, with every counted repetition's counter set to its class count (the
// form the split classifies, grammar.h; a class count never runs out, so it
// reaches every position a real one reaches, and a count below its minimum
// is also followed as one past it). Recursive grammars (JSON values inside
// values) have unboundedly many stacks, so the search stops at
// ReachableTopsLimits; a top it misses is classified on first use, as
// before: the result only moves work, it never changes a mask.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace specstack::grammar {

struct ReachableTopsLimits {
  size_t max_states = 4000;     // stacks explored
  size_t max_stack_depth = 64;  // deeper stacks are not followed (recursion)
  size_t max_tops = 1024;       // bounds the classification work of a hostile grammar
};

// The distinct last `depth` entries (or the whole stack when shorter) of
// every non-empty stack of every state reached, counters unbounded.
std::vector<std::vector<uint32_t>> reachable_tops(const Grammar& g, size_t depth,
                                                  const ReachableTopsLimits& limits = {});

}  // namespace specstack::grammar

#include "grammar/reachable_tops.h"

#include <deque>
#include <memory>
#include <set>

#include "grammar/matcher.h"

namespace specstack::grammar {

std::vector<std::vector<uint32_t>> reachable_tops(const Grammar& g, size_t depth,
                                                  const ReachableTopsLimits& limits) {
  depth = std::max<size_t>(depth, 1);
  // Each stack of a state advances on its own (GrammarMatcher::advance), so
  // the search is over single stacks: far fewer than the sets they form.
  // Shallowest stacks first (a bucket per depth): a recursive rule's nesting
  // multiplies the stacks at each level, and breadth-first by bytes would
  // spend the budget there before reaching the grammar's shallow positions.
  std::vector<std::deque<std::vector<uint32_t>>> queue(limits.max_stack_depth + 1);
  size_t queued = 0;
  std::set<std::vector<uint32_t>> seen;
  std::set<std::vector<uint32_t>> tops;
  auto enqueue = [&](std::vector<uint32_t> stack) {
    if (seen.size() >= limits.max_states || !seen.insert(stack).second) return;
    queue[stack.size()].push_back(std::move(stack));
    ++queued;
  };
  std::vector<size_t> must_go;  // entries of a stack whose class is "may not stop yet"
  auto visit_all = [&](const StackSet& set) {
    for (size_t i = 0; i < set.size(); ++i) {
      const uint32_t b = set.begin(i), e = set.ends[i];
      if (b == e || e - b > limits.max_stack_depth || seen.size() >= limits.max_states) continue;
      std::vector<uint32_t> stack(set.data.begin() + b, set.data.begin() + e);
      must_go.clear();
      for (size_t k = 0; k < stack.size(); ++k) {
        if (!is_counter(stack[k])) continue;
        const Repeat& r = g.repeats[counter_repeat(stack[k])];
        stack[k] =
            counter_entry(counter_repeat(stack[k]), counter_class(r, counter_count(stack[k])));
        if (counter_count(stack[k]) == kMustGoCount) must_go.push_back(k);
      }
      // A real count below its minimum reaches it after some iterations,
      // which a class count never does: every stack with such counters is
      // also reached with any of them past their minimums (all subsets; a
      // stack of many nested minimums, only all or none).
      const size_t n = must_go.size() <= 4 ? size_t{1} << must_go.size() : 2;
      for (size_t subset = 1; subset < n; ++subset) {
        std::vector<uint32_t> variant = stack;
        for (size_t j = 0; j < must_go.size(); ++j) {
          if (must_go.size() > 4 || ((subset >> j) & 1) != 0) {
            variant[must_go[j]] = counter_entry(counter_repeat(stack[must_go[j]]), kMayStopCount);
          }
        }
        enqueue(std::move(variant));
      }
      enqueue(std::move(stack));
    }
  };
  auto g_ref = std::shared_ptr<const Grammar>(&g, [](const Grammar*) {});  // not owned
  visit_all(GrammarMatcher(g_ref).stacks());
  StackSet one, next;
  std::vector<uint32_t> scratch;
  for (size_t d = 0; queued > 0;) {
    while (queue[d].empty()) ++d;
    one.clear();
    one.data = std::move(queue[d].front());
    queue[d].pop_front();
    --queued;
    one.ends.push_back(static_cast<uint32_t>(one.data.size()));
    one.hashes.push_back(0);  // advance() reads only the entries
    const size_t n = std::min(one.data.size(), depth);
    if (tops.size() < limits.max_tops) tops.emplace(one.data.end() - ptrdiff_t(n), one.data.end());
    const ByteSet bytes = GrammarMatcher::next_bytes(g, one);
    for (size_t byte = 0; byte < 256; ++byte) {
      if (!bytes.test(byte)) continue;
      GrammarMatcher::advance(g, one, static_cast<uint8_t>(byte), next, scratch);
      visit_all(next);
    }
    d = 0;  // advancing may have reached shallower stacks
  }
  return {tops.begin(), tops.end()};
}

}  // namespace specstack::grammar

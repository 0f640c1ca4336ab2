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
  auto visit_all = [&](const StackSet& set) {
    for (size_t i = 0; i < set.size(); ++i) {
      const uint32_t b = set.begin(i), e = set.ends[i];
      if (b == e || e - b > limits.max_stack_depth || seen.size() >= limits.max_states) continue;
      std::vector<uint32_t> stack(set.data.begin() + b, set.data.begin() + e);
      for (uint32_t& entry : stack) {
        if (is_counter(entry)) entry = counter_entry(counter_repeat(entry), kUnboundedCount);
      }
      if (seen.insert(stack).second) {
        queue[stack.size()].push_back(std::move(stack));
        ++queued;
      }
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

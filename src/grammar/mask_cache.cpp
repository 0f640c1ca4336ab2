#include "grammar/mask_cache.h"

namespace specstack::grammar {

namespace {

// The hash node, the index node and the shared_ptr's control block of one
// entry, roughly (libstdc++ on 64-bit: ~64 + ~56 + ~32 bytes).
constexpr size_t kEntryOverhead = 160;

}  // namespace

MaskCache::MaskCache(size_t max_bytes) : max_bytes_(max_bytes) {}

size_t MaskCache::entry_bytes(const std::string& key, const TokenMask& mask) {
  return mask.words.size() * sizeof(uint64_t) + key.size() + kEntryOverhead;
}

std::shared_ptr<const TokenMask> MaskCache::find(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  Entry& e = it->second;
  // Re-key the index node in place (no allocation on a hit).
  auto node = order_.extract(Order{e.priority, e.last_use});
  e.priority = inflation_ + e.cost;
  e.last_use = ++clock_;
  node.key() = Order{e.priority, e.last_use};
  order_.insert(std::move(node));
  return e.mask;
}

void MaskCache::evict_one() {
  auto lowest = order_.begin();
  // L rises to the evicted priority: entries inserted or hit from now on
  // outrank those not used since before it, by their cost.
  inflation_ = lowest->first.first;
  auto it = entries_.find(*lowest->second);
  stats_.bytes -= it->second.bytes;
  order_.erase(lowest);
  entries_.erase(it);
  ++stats_.evictions;
  stats_.entries = entries_.size();
}

void MaskCache::insert(std::string key, std::shared_ptr<const TokenMask> mask, uint64_t cost) {
  if (auto it = entries_.find(key); it != entries_.end()) {
    order_.erase(Order{it->second.priority, it->second.last_use});
    stats_.bytes -= it->second.bytes;
    entries_.erase(it);
  }
  const size_t bytes = entry_bytes(key, *mask);
  if (bytes > max_bytes_) {
    stats_.entries = entries_.size();
    return;
  }
  while (stats_.bytes + bytes > max_bytes_) evict_one();
  Entry e;
  e.mask = std::move(mask);
  e.cost = cost;
  e.priority = inflation_ + cost;
  e.last_use = ++clock_;
  e.bytes = bytes;
  const Order order{e.priority, e.last_use};
  auto it = entries_.emplace(std::move(key), std::move(e)).first;
  order_.emplace(order, &it->first);
  stats_.bytes += bytes;
  stats_.entries = entries_.size();
}

}  // namespace specstack::grammar

#include "kv/block_hash.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

namespace specstack {

uint64_t hash_block(const BlockContent& content) {
  // One contiguous buffer (parent hash, extra key, tokens) so a single XXH3
  // call covers everything that must match for a hit.
  constexpr size_t kHeader = 2 * sizeof(uint64_t);
  std::vector<uint8_t> bytes(kHeader + content.tokens.size_bytes());
  std::memcpy(bytes.data(), &content.parent_hash, sizeof(uint64_t));
  std::memcpy(bytes.data() + sizeof(uint64_t), &content.extra_key, sizeof(uint64_t));
  if (!content.tokens.empty()) {
    std::memcpy(bytes.data() + kHeader, content.tokens.data(), content.tokens.size_bytes());
  }
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), 0);
}

}  // namespace specstack

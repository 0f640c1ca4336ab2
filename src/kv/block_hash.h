// Prefix-cache block hashes. A full block's hash chains its parent's hash, so
// equal hashes mean "same tokens after the same prefix"; the extra key keeps
// other KV contents (another model, a sparse selection) out of the dense
// token space. Hashes only find candidates: a hit is confirmed against the
// stored BlockContent, never trusted on its own.
#pragma once

#include <cstdint>
#include <span>

namespace specstack {

// Parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0;

// What a full block holds, as far as prefix caching is concerned.
struct BlockContent {
  uint64_t parent_hash = kRootBlockHash;
  uint64_t extra_key = 0;
  std::span<const int32_t> tokens;  // [block_size] token ids
};

uint64_t hash_block(const BlockContent& content);

}  // namespace specstack

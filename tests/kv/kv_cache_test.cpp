// The host KV pool is reserved lazily: nothing is resident until blocks are
// written, and resident_bytes() (the /metrics gauge) follows the writes.
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <cstring>

namespace specstack {
namespace {

TEST(KvCacheTest, HostPoolIsResidentOnlyWhereWritten) {
  KvCacheShape shape;
  shape.n_layers = 2;
  shape.n_blocks = 1024;
  shape.block_size = 16;
  shape.n_kv_heads = 4;
  shape.head_dim = 64;  // K of one layer: [1024, 16, 4, 64] f32 = 16 MiB
  KvCache cache(shape);
  const size_t layer_bytes = cache.layer(0).k.nbytes();
  ASSERT_EQ(layer_bytes, size_t{16} << 20);
  // Fresh: at most a few (huge) pages, far from the 64 MiB reserved.
  EXPECT_LT(cache.resident_bytes(), size_t{16} << 20);
  EXPECT_GE(cache.nbytes(), size_t{64} << 20);
  // Reads as zero anyway.
  EXPECT_EQ(cache.layer(1).v.f32()[12345], 0.0f);
  std::memset(cache.layer(0).k.raw(), 0x3f, layer_bytes);
  EXPECT_GE(cache.resident_bytes(), layer_bytes);
  EXPECT_LE(cache.resident_bytes(), cache.nbytes() + (size_t{4} << 20));
}

// --kv-dtype bf16 / f16: half the bytes per block, and copy-on-write copies
// whole blocks of 2-byte values (every layer's K and V and the positions).
TEST(KvCacheTest, HalfPrecisionCacheHalvesTheBlockAndCopiesBlocksWhole) {
  KvCacheShape shape;
  shape.n_layers = 3;
  shape.n_blocks = 8;
  shape.block_size = 16;
  shape.n_kv_heads = 2;
  shape.head_dim = 64;
  const size_t f32_block = KvCache::bytes_per_block(shape);
  const size_t positions = 16 * sizeof(int32_t);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    shape.dtype = dtype;
    EXPECT_EQ(KvCache::bytes_per_block(shape) - positions, (f32_block - positions) / 2);
    KvCache cache(shape);
    EXPECT_EQ(cache.layer(2).v.dtype(), dtype);
    EXPECT_EQ(cache.nbytes(), KvCache::bytes_per_block(shape) * 8);
    const int64_t block_values = 16 * 2 * 64;
    for (int64_t l = 0; l < 3; ++l) {
      auto* k = cache.layer(l).k.data<uint16_t>();
      auto* v = cache.layer(l).v.data<uint16_t>();
      for (int64_t i = 0; i < block_values; ++i) {
        k[3 * block_values + i] = static_cast<uint16_t>(l * 1000 + i);
        v[3 * block_values + i] = static_cast<uint16_t>(l * 1000 + i + 7);
      }
    }
    cache.layer(0).positions.data<int32_t>()[3 * 16 + 5] = 42;
    cache.copy_block(3, 6);
    for (int64_t l = 0; l < 3; ++l) {
      const auto* k = cache.layer(l).k.data<uint16_t>();
      const auto* v = cache.layer(l).v.data<uint16_t>();
      EXPECT_EQ(std::memcmp(k + 6 * block_values, k + 3 * block_values, block_values * 2), 0);
      EXPECT_EQ(std::memcmp(v + 6 * block_values, v + 3 * block_values, block_values * 2), 0);
      EXPECT_EQ(k[7 * block_values], 0);  // the next block untouched
    }
    EXPECT_EQ(cache.layer(1).positions.data<int32_t>()[6 * 16 + 5], 42);
  }
}

}  // namespace
}  // namespace specstack

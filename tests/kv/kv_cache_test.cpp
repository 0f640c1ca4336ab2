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

}  // namespace
}  // namespace specstack

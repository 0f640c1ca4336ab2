#include "tensor/host_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "tensor/tensor.h"

namespace specstack {
namespace {

bool all_zero(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != 0) return false;
  return true;
}

TEST(HostMemoryTest, SmallBuffersAreHeapZeroedAndAligned) {
  ZeroedAllocation a = allocate_zeroed(1000);
  EXPECT_FALSE(a.lazy);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.memory.get()) % 64, 0u);
  EXPECT_TRUE(all_zero(a.memory.get(), 1000));
  ZeroedAllocation empty = allocate_zeroed(0);  // still a valid, aligned pointer
  ASSERT_NE(empty.memory, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(empty.memory.get()) % 64, 0u);
}

TEST(HostMemoryTest, LargeBuffersAreMappedLazilyAndReadAsZero) {
  const size_t bytes = 64 * kLazyZeroThresholdBytes + 100;  // 64 MiB and a ragged tail
  ZeroedAllocation a = allocate_zeroed(bytes);
  EXPECT_TRUE(a.lazy);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.memory.get()) % 64, 0u);
  // Nothing touched yet: (almost) nothing resident. The kernel may fault in a
  // huge page around an address it maps, hence the slack of two 2 MiB pages.
  EXPECT_LT(resident_bytes(a.memory.get(), bytes), size_t{4} << 20);
  auto* p = static_cast<unsigned char*>(a.memory.get());
  EXPECT_TRUE(all_zero(p + bytes - 4096, 4096));
  // Writing 16 MiB makes at least that much resident, and the rest still reads zero.
  std::memset(p, 1, size_t{16} << 20);
  EXPECT_GE(resident_bytes(p, bytes), size_t{16} << 20);
  EXPECT_TRUE(all_zero(p + (size_t{16} << 20), size_t{1} << 20));
}

TEST(HostMemoryTest, ResidentBytesIsBoundedByTheRange) {
  ZeroedAllocation a = allocate_zeroed(4096);
  std::memset(a.memory.get(), 7, 4096);
  EXPECT_LE(resident_bytes(static_cast<char*>(a.memory.get()) + 10, 100), 100u);
  EXPECT_EQ(resident_bytes(nullptr, 100), 0u);
}

TEST(HostMemoryTest, LargeTensorZerosAreZero) {
  // [1024, 1024] f32 = 4 MiB: over the threshold, so mapped.
  Tensor t = Tensor::zeros(DType::kF32, {1024, 1024});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  EXPECT_TRUE(all_zero(t.raw(), t.nbytes()));
  t.f32()[1024 * 1024 - 1] = 1.0f;  // writable to the last element
  EXPECT_EQ(t.f32()[1024 * 1024 - 1], 1.0f);
}

}  // namespace
}  // namespace specstack

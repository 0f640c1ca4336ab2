#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cpu/cpu_elementwise.h"
#include "backend/cpu/cpu_matmul.h"
#include "cpu_test_helpers.h"

namespace specstack {
namespace {

using specstack::testing::copy_of;
using specstack::testing::random_f32;
using specstack::testing::random_weight;
using specstack::testing::rel_error;

TEST(CpuBackend, OwnsThreadsAndKeepsOpenBlasSingleThreaded) {
  CpuBackend backend(CpuBackendOptions{.n_threads = 2});
  EXPECT_EQ(backend.device(), Device::kCpu);
  EXPECT_EQ(backend.pool().n_threads(), 2);
  EXPECT_EQ(openblas_get_num_threads(), 1);
}

// The backend forwards to the native-ISA kernels: same bits as calling them
// directly, on both sides of the small/large matmul crossover.
TEST(CpuBackend, ForwardsToKernels) {
  CpuBackend cpu(CpuBackendOptions{.n_threads = 2});
  Backend& backend = cpu;
  ThreadPool pool(2);
  std::mt19937 rng(81);
  auto w = random_weight(rng, DType::kBF16, 40, 24);
  Tensor bias = random_f32(rng, {40});
  const int64_t crossover = cpu::matmul_small_max_rows(DType::kBF16);
  for (int64_t n : {crossover, crossover + 1}) {
    Tensor x = random_f32(rng, {n, 24});
    Tensor y = Tensor::zeros(DType::kF32, {n, 40});
    Tensor expected = Tensor::zeros(DType::kF32, {n, 40});
    backend.matmul(x, w.tensor, &bias, y);
    if (n <= crossover) {
      cpu::matmul_small(pool, x, w.tensor, &bias, expected);
    } else {
      cpu::matmul_large(pool, x, w.tensor, &bias, expected);
    }
    EXPECT_EQ(rel_error(y, expected), 0.0) << "n=" << n;
  }

  Tensor x = random_f32(rng, {6, 32});
  Tensor weight = random_f32(rng, {32});
  Tensor a = copy_of(x), b = copy_of(x);
  backend.rmsnorm(a, weight, 1e-6f, a);
  cpu::rmsnorm(pool, b, weight, 1e-6f, b);
  EXPECT_EQ(rel_error(a, b), 0.0);

  backend.softmax_rows(a);
  cpu::softmax_rows(pool, b);
  EXPECT_EQ(rel_error(a, b), 0.0);

  backend.silu_mul(a, x, a);
  cpu::silu_mul(pool, b, x, b);
  EXPECT_EQ(rel_error(a, b), 0.0);

  backend.add_inplace(a, x);
  cpu::add_inplace(pool, b, x);
  EXPECT_EQ(rel_error(a, b), 0.0);

  Tensor inv_freq = random_f32(rng, {8}, 0.0f, 1.0f);
  std::vector<int32_t> positions = {0, 5, 9, 100, 4095, 131071};
  backend.rope(a, 16, positions, inv_freq);
  cpu::rope(pool, b, 16, positions, inv_freq);
  EXPECT_EQ(rel_error(a, b), 0.0);

  std::vector<int32_t> ids = {3, 0, 39};
  Tensor e1 = Tensor::zeros(DType::kF32, {3, 24}), e2 = Tensor::zeros(DType::kF32, {3, 24});
  backend.embedding(w.tensor, ids, e1);
  cpu::embedding(pool, w.tensor, ids, e2);
  EXPECT_EQ(rel_error(e1, e2), 0.0);
  EXPECT_EQ(e1.f32()[24], float(w.values[0]));  // row 1 holds token 0
}

}  // namespace
}  // namespace specstack

// The CPU backend: OpenBLAS sgemm for multi-token matmuls (weights converted
// to f32 one tile at a time), AVX2 matvec for single tokens (bf16/f16 read
// directly), vectorised elementwise kernels, all parallelised on a ThreadPool
// the backend owns.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "base/thread_pool.h"

namespace specstack {

struct CpuBackendOptions {
  int n_threads = 0;  // 0 = all hardware threads
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = {});
  ~CpuBackend() override;

  Device device() const override { return Device::kCpu; }
  ThreadPool& pool() { return pool_; }

  void embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) override;
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override;
  void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) override;
  void add_inplace(Tensor& x, const Tensor& y) override;
  void rope(Tensor& x, int64_t head_dim, std::span<const int32_t> positions,
            const Tensor& inv_freq) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void softmax_rows(Tensor& x) override;
  void write_kv(const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                KvLayerView& layer) override;
  void attention(const Tensor& q, const AttentionBatch& batch, const KvLayerView& layer,
                 const AttentionParams& params, Tensor& out) override;

 private:
  ThreadPool pool_;
};

}  // namespace specstack

#include "backend/cpu/cpu_backend.h"

#include <cblas.h>


#include "backend/cpu/cpu_elementwise.h"
#include "backend/cpu/cpu_matmul.h"
#include "backend/cpu/op_timer.h"

namespace specstack {

CpuBackend::CpuBackend(const CpuBackendOptions& options) : pool_(options.n_threads) {
  // matmul_large runs one single-threaded sgemm per weight tile on pool_. If
  // OpenBLAS also spawned its own threads, the two pools would oversubscribe
  // the cores and spin against each other. This is a process-wide OpenBLAS
  // setting; every CpuBackend wants the same value, so setting it again is
  // harmless.
  openblas_set_num_threads(1);
}

CpuBackend::~CpuBackend() = default;


void CpuBackend::embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  SS_PROFILE(kOpEmbedding);
  cpu::embedding(pool_, table, ids, out);
}

void CpuBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  SS_PROFILE(kOpMatmul);
  cpu::matmul(pool_, x, w, bias, y);
}

void CpuBackend::rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  SS_PROFILE(kOpRmsnorm);
  cpu::rmsnorm(pool_, x, weight, eps, y);
}

void CpuBackend::add_inplace(Tensor& x, const Tensor& y) {
  SS_PROFILE(kOpAdd);
  cpu::add_inplace(pool_, x, y);
}

void CpuBackend::rope(Tensor& x, int64_t head_dim, std::span<const int32_t> positions,
                      const Tensor& inv_freq) {
  SS_PROFILE(kOpRope);
  cpu::rope(pool_, x, head_dim, positions, inv_freq);
}

void CpuBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  SS_PROFILE(kOpSiluMul);
  cpu::silu_mul(pool_, gate, up, out);
}

void CpuBackend::softmax_rows(Tensor& x) {
  SS_PROFILE(kOpSoftmax);
  cpu::softmax_rows(pool_, x);
}

}  // namespace specstack

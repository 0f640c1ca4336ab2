// DeviceBuffer: one cudaMalloc'd allocation with RAII, typed for convenience.
// Movable, not copyable. Host<->device copies are synchronous helpers for
// set-up and tests; the hot path uses the stream-ordered copies directly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"

namespace specstack::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  // Reallocates (contents lost) when count differs from the current size.
  void resize(size_t count) {
    if (count == count_) return;
    release();
    if (count > 0) SS_CUDA_CHECK(cudaMalloc(&data_, count * sizeof(T)));
    count_ = count;
  }
  // Grows (contents lost) only when count exceeds the current size.
  void reserve(size_t count) {
    if (count > count_) resize(count);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t nbytes() const { return count_ * sizeof(T); }

  void upload(const T* host, size_t count) {
    reserve(count);
    if (count) SS_CUDA_CHECK(cudaMemcpy(data_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }
  std::vector<T> download() const { return download(count_); }
  std::vector<T> download(size_t count) const {
    std::vector<T> host(count);
    if (count)
      SS_CUDA_CHECK(cudaMemcpy(host.data(), data_, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (tests poison outputs with 0xFF = NaN).
  void fill_bytes(int byte) {
    if (count_) SS_CUDA_CHECK(cudaMemset(data_, byte, nbytes()));
  }

 private:
  void release() {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    count_ = 0;
  }
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace specstack::cuda

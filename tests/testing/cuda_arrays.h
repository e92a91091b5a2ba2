// Helpers for GPU kernel tests: device arrays poisoned before use, and bf16
// inputs drawn and widened the same way for the GPU and its CPU reference.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "testing/numeric.h"

namespace spillway::testing {

// A device array of n elements, poisoned with 0xFF bytes (NaN as bf16 and as
// f32) so an element a kernel fails to write shows up as NaN.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    SPW_CUDA(cudaMalloc(&data_, std::max<size_t>(n, 1) * sizeof(T)));
    poison();
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  // Both wait for the device: the kernels under test run on non-blocking
  // streams, which do not wait for the legacy stream's memset, nor for a
  // pageable copy's DMA, which cudaMemcpy may return before (a race seen on
  // a busy GPU as poison read back).
  void upload(const std::vector<T>& host) {
    SPW_CUDA(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    SPW_CUDA(cudaDeviceSynchronize());
  }
  void poison() {
    SPW_CUDA(cudaMemset(data_, 0xff, n_ * sizeof(T)));
    SPW_CUDA(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    SPW_CUDA(cudaDeviceSynchronize());
    std::vector<T> host(n_);
    SPW_CUDA(cudaMemcpy(host.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t n_;
  T* data_ = nullptr;
};

// Seeded uniform values rounded to bf16.
inline std::vector<bf16> random_bf16(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<bf16> out;
  out.reserve(static_cast<size_t>(n));
  for (double v : random_vector(n, seed, lo, hi)) out.push_back(to_bf16(static_cast<float>(v)));
  return out;
}

inline std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> out;
  out.reserve(v.size());
  for (bf16 h : v) out.push_back(to_float(h));
  return out;
}

inline std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

inline std::vector<uint16_t> bits_of(const std::vector<bf16>& v) {
  std::vector<uint16_t> out;
  out.reserve(v.size());
  for (bf16 h : v) out.push_back(h.bits);
  return out;
}

}  // namespace spillway::testing

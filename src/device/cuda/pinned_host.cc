#include "device/cuda/pinned_host.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "device/cuda/cuda_check.h"

namespace spillway {

void PinnedRanges::add(const void* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(4096);
  const auto begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
  ranges_.push_back({begin, end});
}

void PinnedRanges::pin() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uintptr_t, uintptr_t>> merged;
  for (auto r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_.clear();
  for (auto r : merged) {
    SPW_CUDA(cudaHostRegister(reinterpret_cast<void*>(r.first), r.second - r.first, cudaHostRegisterDefault));
    pinned_.push_back(reinterpret_cast<void*>(r.first));
  }
}

PinnedRanges::~PinnedRanges() {
  for (void* p : pinned_) SPW_CUDA_WARN(cudaHostUnregister(p));
}

PinnedBuffer::PinnedBuffer(uint64_t bytes) : bytes_(bytes) {
  if (bytes > 0) SPW_CUDA(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) SPW_CUDA_WARN(cudaFreeHost(data_));
}

}  // namespace spillway

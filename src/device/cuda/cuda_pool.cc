#include "device/cuda/cuda_pool.h"

#include "base/bytes.h"
#include "device/arena.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/device_guard.h"

namespace spillway {

namespace {

class CudaPoolBacking final : public MemoryBacking {
 public:
  CudaPoolBacking(const std::string& space_name, CudaPoolKind kind, int ordinal, uint64_t capacity)
      : kind_(kind), arena_(space_name, capacity, MemorySpace::kAlignment) {
    if (arena_.capacity() == 0) return;
    CudaDeviceGuard guard(ordinal);
    void* base = nullptr;
    try {
      if (kind_ == CudaPoolKind::device) {
        SPW_CUDA(cudaMalloc(&base, arena_.capacity()));
      } else {
        // Portable: pinned for every GPU in the process, not only this one.
        SPW_CUDA(cudaHostAlloc(&base, arena_.capacity(), cudaHostAllocPortable));
      }
    } catch (const Error& e) {
      throw Error(space_name, "cannot reserve a pool of " + format_bytes(arena_.capacity()) +
                                  " (" + e.what() + ")");
    }
    base_ = static_cast<char*>(base);
  }

  ~CudaPoolBacking() override {
    if (base_ == nullptr) return;
    if (kind_ == CudaPoolKind::device) {
      SPW_CUDA_WARN(cudaFree(base_));
    } else {
      SPW_CUDA_WARN(cudaFreeHost(base_));
    }
  }

  uint64_t capacity() const { return arena_.capacity(); }

  void* allocate(uint64_t bytes, std::string_view what) override {
    return base_ + arena_.allocate(bytes, what);
  }
  void free(void* ptr, uint64_t) override {
    arena_.free(static_cast<uint64_t>(static_cast<char*>(ptr) - base_));
  }

 private:
  CudaPoolKind kind_;
  Arena arena_;
  char* base_ = nullptr;
};

}  // namespace

std::unique_ptr<MemorySpace> make_cuda_pool_space(std::string name, CudaPoolKind kind,
                                                  int ordinal, uint64_t capacity) {
  auto backing = std::make_unique<CudaPoolBacking>(name, kind, ordinal, capacity);
  const uint64_t budget = backing->capacity();
  return std::make_unique<MemorySpace>(std::move(name), budget, std::move(backing));
}

}  // namespace spillway

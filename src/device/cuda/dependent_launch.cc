#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "device/cuda/cuda_check.h"
#include "device/cuda/dependent_launch.cuh"

namespace spillway {

bool dependent_launch_supported() {
  static const bool turned_off = [] {
    const char* v = std::getenv("SPILLWAY_DEPENDENT_LAUNCH");
    return v != nullptr && std::strcmp(v, "0") == 0;
  }();
  if (turned_off) return false;
  // Per ordinal: 0 not asked yet, 1 no, 2 yes.
  static std::array<std::atomic<int>, 64> known{};
  int ordinal = 0;
  SPW_CUDA(cudaGetDevice(&ordinal));
  if (ordinal < 0 || ordinal >= static_cast<int>(known.size())) return false;
  int answer = known[static_cast<size_t>(ordinal)].load(std::memory_order_relaxed);
  if (answer == 0) {
    int major = 0;
    SPW_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
    answer = major >= 9 ? 2 : 1;
    known[static_cast<size_t>(ordinal)].store(answer, std::memory_order_relaxed);
  }
  return answer == 2;
}

}  // namespace spillway

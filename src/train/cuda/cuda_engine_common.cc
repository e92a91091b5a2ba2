#include "train/cuda/cuda_engine_common.h"

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"

namespace spillway::train {

std::unique_ptr<Device> open_cuda_device(const EngineOptions& options, uint64_t pinned_bytes) {
  SPW_CHECK(cuda_device_count() > 0, "--device cuda", "no CUDA GPU is visible to this process");
  const uint64_t budget = options.memory.device_mem ? options.memory.device_mem : MemorySpace::kUnlimited;
  return make_cuda_device(0, budget, pinned_bytes);
}

bool fused_projections(const EngineOptions& options, bool planned_engine) {
  const ProjectionMode p = options.kernels.projections;
  return p == ProjectionMode::fused || (p == ProjectionMode::automatic && !planned_engine);
}

std::string cuda_engine_name(int ordinal) {
  cudaDeviceProp prop{};
  SPW_CUDA(cudaGetDeviceProperties(&prop, ordinal));
  return "cuda:" + std::to_string(ordinal) + " " + std::string(prop.name);
}

void check_token_ids(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t vocab,
                     size_t batch_tokens) {
  SPW_CHECK(inputs.size() == batch_tokens && targets.size() == batch_tokens, "tokens", "got ", inputs.size(),
            " tokens and ", targets.size(), " targets for a batch of ", batch_tokens);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SPW_CHECK(inputs[i] >= 0 && inputs[i] < vocab, "tokens", "id ", inputs[i], " at position ", i,
              " is outside the vocabulary of ", vocab);
    SPW_CHECK(targets[i] < vocab, "targets", "id ", targets[i], " at position ", i,
              " is outside the vocabulary of ", vocab);
  }
}

}  // namespace spillway::train

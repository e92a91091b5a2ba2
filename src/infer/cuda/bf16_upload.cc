#include "infer/cuda/bf16_upload.h"

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/cast.h"

namespace spillway::infer {

int64_t Bf16Upload::staging_floats(const model::LlamaWeights& w) {
  int64_t largest = 0;
  for (const auto& t : w.tensors()) {
    SPW_CHECK(static_cast<int64_t>(t.data.size()) == t.shape.numel(), t.name, "holds ", t.data.size(),
              " values for a shape of ", t.shape.numel());
    largest = std::max(largest, t.shape.numel());
  }
  // Pieces of 8M floats (32 MiB): larger ones would not copy faster.
  return std::min<int64_t>(largest, 8ll << 20);
}

void Bf16Upload::copy(const float* host, int64_t n, bf16* device) {
  for (int64_t at = 0; at < n; at += staging_floats_) {
    const int64_t len = std::min(staging_floats_, n - at);
    SPW_CUDA(cudaMemcpyAsync(staging_, host + at, static_cast<size_t>(len) * sizeof(float), cudaMemcpyHostToDevice,
                             stream_));
    ops::cast_cuda(staging_, DType::f32, device + at, DType::bf16, len, stream_);
  }
}

}  // namespace spillway::infer

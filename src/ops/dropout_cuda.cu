#include <cuda_bf16.h>

#include <cstdint>

#include "ops/bf16x8.cuh"
#include "ops/cuda_elementwise.cuh"
#include "ops/dropout.h"

namespace spillway::ops {

namespace {

using elementwise::launch_elementwise;
using elementwise::vector_head;

struct Dropout {
  const __nv_bfloat16* x;
  __nv_bfloat16* out;
  const int32_t* key;
  uint32_t salt, threshold;
  float scale;

  __device__ float one(float v, int64_t i, uint64_t k) const {
    return dropout_keeps(k, salt, static_cast<uint64_t>(i), threshold) ? v * scale : 0.0f;
  }
  __device__ void vector(int64_t i) const {
    const uint64_t k = dropout_key(key);
    float f[8];
    widen8(*reinterpret_cast<const uint4*>(x + i), f);
    uint4 raw;
    auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      h[j] = __floats2bfloat162_rn(one(f[2 * j], i + 2 * j, k), one(f[2 * j + 1], i + 2 * j + 1, k));
    }
    *reinterpret_cast<uint4*>(out + i) = raw;
  }
  __device__ void scalar(int64_t i) const {
    out[i] = __float2bfloat16_rn(one(__bfloat162float(x[i]), i, dropout_key(key)));
  }
};

}  // namespace

void dropout_forward_cuda(const bf16* x, bf16* out, int64_t n, const int32_t* key, uint32_t salt,
                          uint32_t threshold, float scale, cudaStream_t stream) {
  const Dropout op{reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<__nv_bfloat16*>(out), key, salt,
                   threshold, scale};
  launch_elementwise<8>("dropout", op, n, vector_head({{x, 2}, {out, 2}}, 8), stream);
}

}  // namespace spillway::ops

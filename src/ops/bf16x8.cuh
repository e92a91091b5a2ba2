// Eight bf16 in one 16-byte vector widened to fp32: how the bf16 kernels
// read their inputs a vector at a time.
#pragma once

#include <cuda_bf16.h>

namespace spillway::ops {

__device__ inline void widen8(const uint4& raw, float (&f)[8]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 v = __bfloat1622float2(h[k]);
    f[2 * k] = v.x;
    f[2 * k + 1] = v.y;
  }
}

}  // namespace spillway::ops

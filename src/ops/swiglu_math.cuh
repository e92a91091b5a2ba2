// SwiGLU's per-element math on the GPU, shared by the elementwise kernels
// (swiglu_cuda.cu) and the GEMM that computes the gate in its epilogue
// (gemm_hopper.cu), so both give the same bits.
//
// The sigmoid is exp2 and a reciprocal on the special-function unit
// (__expf, __fdividef: a few ulp in fp32, far below bf16's rounding), not
// the IEEE expf and division (about 30 instructions). On an H100 the
// training step runs at the power cap, where instructions are energy and
// energy is time: the IEEE math made the fused gate|up product measurably
// slower (docs/performance.md).
//
// __fdividef(x, y) returns 0 for |y| > 2^126, i.e. the sigmoid of g < -87.3,
// where the exact value is below 1e-37.
#pragma once

#include <cuda_runtime.h>

namespace spillway::ops::swiglu_math {

__device__ __forceinline__ float sigmoid(float g) { return __fdividef(1.0f, 1.0f + __expf(-g)); }

// silu(g) * u = g * sigmoid(g) * u.
__device__ __forceinline__ float silu_times(float g, float u) { return g * sigmoid(g) * u; }

// The backward, in the CPU kernel's order (ops/swiglu.h).
__device__ __forceinline__ void grads(float d, float g, float u, float& dg, float& du) {
  const float s = sigmoid(g);
  dg = d * u * s * (1.0f + g * (1.0f - s));
  du = d * g * s;
}

}  // namespace spillway::ops::swiglu_math

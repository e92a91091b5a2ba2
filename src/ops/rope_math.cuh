// RoPE's per-element math on the GPU, shared by the rope kernels
// (rope_cuda.cu) and the q|k|v GEMM that rotates q and k in its epilogue
// (gemm_hopper_rope.cuh), so both give the same bits: the angle is the
// CPU's (one fp32 product of the position and the frequency), its cosine
// and sine the accurate cosf and sinf, and the rotation is rounded step by
// step (no fused multiply-add the compiler might form in one kernel and not
// in the other).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace spillway::ops::rope_math {

__device__ __forceinline__ float angle(int64_t pos, float inv_freq) { return static_cast<float>(pos) * inv_freq; }

// (lo, hi) rotated by the angle whose cosine is c and sine s.
__device__ __forceinline__ void rotate(float lo, float hi, float c, float s, float& out_lo, float& out_hi) {
  out_lo = __fsub_rn(__fmul_rn(lo, c), __fmul_rn(hi, s));
  out_hi = __fadd_rn(__fmul_rn(hi, c), __fmul_rn(lo, s));
}

}  // namespace spillway::ops::rope_math

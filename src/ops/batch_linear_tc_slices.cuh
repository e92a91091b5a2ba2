// How a split batch_linear_tc call's slices are added (ops/batch_linear_tc.h):
// shared by its own add and by the decoder's fused epilogues
// (infer/cuda/decode_epilogues_cuda.h), so that both give the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace spillway::ops::split_sums {

// Element e's sum over `slices` slices `stride` floats apart, added in slice
// order from the first. Eight slices' loads are issued before any is added:
// one at a time, a thread waited on each in turn.
__device__ __forceinline__ float sum(const float* workspace, int64_t stride, int64_t slices, int64_t e) {
  constexpr int kAhead = 8;
  float total = 0.0f;
  for (int64_t s0 = 0; s0 < slices; s0 += kAhead) {
    float v[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) v[i] = s0 + i < slices ? __ldcg(workspace + (s0 + i) * stride + e) : 0.0f;
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (s0 + i < slices) total = s0 + i == 0 ? v[i] : __fadd_rn(total, v[i]);
    }
  }
  return total;
}

}  // namespace spillway::ops::split_sums

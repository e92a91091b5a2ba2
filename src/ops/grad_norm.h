// The global gradient norm for clipping, and the scaling that clips.
//
// Contract (GPU): sum_of_squares_cuda writes sum_i x[i]^2 over n floats into
// *out (device, one double), in a fixed order (a fixed grid of partial sums,
// then one ordered sum of the partials), so the norm, and every clipped step
// after it, is the same run to run. `accumulate` true adds to *out instead
// of overwriting it, so the squares of many tensors sum into one number.
// scale_cuda multiplies n floats by s in place.
// The engines do not scale gradients to clip: they fold the clipping factor
// (train/optimizer.h's accumulated_grad_scale) into AdamW's grad_scale.
#pragma once

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include <cstdint>

namespace spillway::ops {

// Device workspace sum_of_squares_cuda needs (its partial sums).
uint64_t sum_of_squares_workspace_bytes();
void sum_of_squares_cuda(const float* x, int64_t n, double* out, bool accumulate, void* workspace,
                         cudaStream_t stream);
void scale_cuda(float* x, int64_t n, float s, cudaStream_t stream);

}  // namespace spillway::ops
#endif

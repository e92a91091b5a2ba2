// Elementwise sums: the residual stream and gradient accumulation.
//
// Contract: out = a + b over n elements (out may alias a or b); with
//           `accumulate`, out += a + b (the sum a + b, rounded to T, is added
//           to what out holds): the last add of a tied parameter's gradient
//           sums into the caller's buffer;
//           accumulate: dst += src.
// Backward of out = a + b: da = dout, db = dout (the graph passes dout on,
// no kernel runs).
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, bool accumulate = false);

template <typename T>
void accumulate(T* dst, const T* src, int64_t n);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU: the contract above. The bf16 sum is formed in fp32 and rounded once
// (accumulating: a + b is rounded to bf16, then added to out and rounded
// again, as the CPU's T arithmetic would); fp32 is the dtype of gradients, so
// tied parameters' gradients are summed (add_cuda) and micro-batches
// accumulated (accumulate_cuda, or add_cuda with `accumulate`) in fp32.
void add_cuda(const bf16* a, const bf16* b, bf16* out, int64_t n, cudaStream_t stream,
              bool accumulate = false);
void add_cuda(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream,
              bool accumulate = false);
void accumulate_cuda(float* dst, const float* src, int64_t n, cudaStream_t stream);

}  // namespace spillway::ops
#endif

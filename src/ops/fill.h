// Fills a tensor with one value: the seed gradient of the loss (1) and the
// gradient of a parameter the loss does not reach (0).
//
// Contract: dst[i] = value (converted to dtype) for n elements; dtype is f32,
// f64 or bf16.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace spillway::ops {

void fill(void* dst, DType dtype, int64_t n, double value);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

namespace spillway::ops {
void fill_cuda(void* dst, DType dtype, int64_t n, double value, cudaStream_t stream);
}  // namespace spillway::ops
#endif

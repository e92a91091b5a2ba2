// The matmul of batched decoding on the CPU, y[rows, out] = x[rows, in] W^T
// (W stored [out, in] as in a checkpoint), written so that each element is
// summed in an order fixed by `in` alone: a row's result is the same bits
// whatever rows share the call. A BLAS picks its kernels and blocking by the
// whole shape, so one request's logits would change with the batch around it.
//
// Each weight row is read once for all `rows` (it stays in cache while every
// row of x is dotted with it): the batch costs one pass over the weights.
#pragma once

#include <cstdint>

namespace spillway::infer {

void linear_rows(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out);

// dot(a, b) over n numbers in the same fixed order linear_rows uses.
float dot_fixed_order(const float* a, const float* b, int64_t n);

}  // namespace spillway::infer

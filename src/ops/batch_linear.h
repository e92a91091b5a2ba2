// The matmul of batched decoding on the GPU, y[rows, out] = x[rows, in] W^T
// (W stored [out, in] as in a checkpoint), bf16 inputs and fp32 sums, with
// each element summed in an order fixed by `in` alone: a row's result is the
// same bits however many rows share the call and wherever it sits among them.
// cuBLAS picks its algorithm and its split of `in` by the whole shape, so a
// request's logits would change with the batch around it, which breaks
// infer/batch_decoder.h's contract.
//
// The order, for one output element: `in` is cut into pieces of 8; lane l of
// 32 sums pieces l, l + 32, l + 64, ... in turn, each piece's 8 products in
// order, by fused multiply-adds into one fp32 sum; then the 32 lane sums fold
// pairwise, lane l with lane l + 16, then l + 8, 4, 2, 1.
// batch_linear_reference is that order on the CPU, bit for bit.
//
// `row_index` (null: row r of y is row r of x): y's row r is x's row
// row_index[r], so the lm_head can read only each sequence's last row.
// `in` must be a multiple of 8 and x, w 16-byte aligned (whole vectors).
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace spillway::ops {

void batch_linear_reference(const bf16* x, const int32_t* row_index, const bf16* w, float* y, int64_t rows,
                            int64_t in, int64_t out);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

namespace spillway::ops {

// GPU: one warp per output column, reading its weight row once for every 16
// rows of x (once in all for a decode step of up to 16 sequences); the weight
// read dominates decoding, so this runs at the memory's speed there. Prompts
// run on CUDA cores, not tensor cores: batch invariance first. Every pointer
// is device memory; y is bf16 (rounded once from the fp32 sum) or fp32.
void batch_linear_cuda(const bf16* x, const int32_t* row_index, const bf16* w, bf16* y, int64_t rows, int64_t in,
                       int64_t out, cudaStream_t stream);
void batch_linear_cuda(const bf16* x, const int32_t* row_index, const bf16* w, float* y, int64_t rows, int64_t in,
                       int64_t out, cudaStream_t stream);

}  // namespace spillway::ops
#endif

// The batch-invariant matmul of ops/batch_linear.h on tensor cores:
// y[rows, out] = x[rows, in] W^T (W stored [out, in]), bf16 inputs, fp32
// sums, where a row's result is the same bits however many rows share the
// call and wherever it sits among them, and prompts run at tensor-core
// rates instead of the CUDA cores'.
//
// The order, for one output element: `in` is cut into slices of
// kBatchLinearTcSlice (the last one shorter); each slice is summed from
// zero by a chain of mma.sync m16n8k16 instructions over its blocks of 32
// inputs in turn (two instructions a block, each taking a fixed half of the
// block's inputs); the slices' sums are then added in order. Nothing in it
// depends on the rows: a row's products meet only its own row's, and an
// instruction computes every element of its tile alike.
//
// Two ways to run that order, the same bits either way: few rows (a decode
// step, at most 64) split the slices over more of the GPU, each slice's
// sum written to `workspace` and added in order by a second kernel; more
// rows (prompts) keep every slice of a tile in one warp, adding as they
// go, the block's warps sharing x's and W's blocks of 32 inputs through
// shared memory. A null workspace always takes the second way.
//
// Unlike the CUDA-core kernel there is no bit-exact CPU reference (the
// instruction's own rounding inside a block is the hardware's); the tests
// check the contract on the GPU and the values against float64.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace spillway::ops {

// Narrow enough that a decode step's split runs as many warps as the
// CUDA-core kernel (each reading 8 KB of a weight), wide enough that the
// slices' adds cost nothing.
inline constexpr int64_t kBatchLinearTcSlice = 512;
// Calls of at most this many rows (a decode step's) run split where given
// the workspace: running whole, so few rows keep too few warps busy.
inline constexpr int64_t kBatchLinearTcSplitRows = 64;

// Slices of kBatchLinearTcSlice inputs a call of `in` inputs sums apart.
inline int64_t batch_linear_tc_slices(int64_t in) { return (in + kBatchLinearTcSlice - 1) / kBatchLinearTcSlice; }

// Bytes of every slice's sums of `rows` rows (0 for more rows than
// kBatchLinearTcSplitRows): batch_linear_tc_slices_cuda's workspace.
inline uint64_t batch_linear_tc_slices_bytes(int64_t rows, int64_t in, int64_t out) {
  if (rows < 1 || rows > kBatchLinearTcSplitRows || out < 1) return 0;
  return static_cast<uint64_t>(batch_linear_tc_slices(in) * rows * out) * sizeof(float);
}

// Workspace bytes that let `rows` rows run split (0 where they run whole:
// more rows than kBatchLinearTcSplitRows, or a single slice).
inline uint64_t batch_linear_tc_workspace_bytes(int64_t rows, int64_t in, int64_t out) {
  return batch_linear_tc_slices(in) < 2 ? 0 : batch_linear_tc_slices_bytes(rows, in, out);
}

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

namespace spillway::ops {

// Every pointer is device memory; `row_index` as in batch_linear_cuda (y's
// row r is x's row row_index[r]). `in` must be a multiple of 8, x and w
// 16-byte aligned; `workspace` null or batch_linear_tc_workspace_bytes() of
// fp32 memory. y is bf16 (rounded once from the fp32 sum) or fp32.
void batch_linear_tc_cuda(const bf16* x, const int32_t* row_index, const bf16* w, bf16* y, int64_t rows, int64_t in,
                          int64_t out, float* workspace, cudaStream_t stream);
void batch_linear_tc_cuda(const bf16* x, const int32_t* row_index, const bf16* w, float* y, int64_t rows, int64_t in,
                          int64_t out, float* workspace, cudaStream_t stream);

// The split half of a call alone, for a caller that adds the slices itself
// with what follows the matmul (infer/cuda/decode_epilogues_cuda.h), in the
// order ops/batch_linear_tc_slices.cuh adds them: slice s's sums of y's
// element (r, n) into workspace[(s * rows + r) * out + n] (a single slice
// too). Returns false, running nothing, for more rows than
// kBatchLinearTcSplitRows (or none).
bool batch_linear_tc_slices_cuda(const bf16* x, const int32_t* row_index, const bf16* w, float* workspace,
                                 int64_t rows, int64_t in, int64_t out, cudaStream_t stream);

}  // namespace spillway::ops
#endif

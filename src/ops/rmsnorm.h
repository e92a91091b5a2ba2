// RMSNorm (LLaMA): y = x / sqrt(mean(x^2) + eps) * weight, per row.
//
// Contract: x, y [rows, dim]; weight [dim]; rstd [rows] is written by forward
// (1 / sqrt(mean(x^2) + eps)) and read by backward, so backward never
// recomputes the reduction.
//
// Backward, with xhat = x * rstd:
//   dweight[j] = sum_r dy[r, j] * xhat[r, j]
//   dx[r, :]   = rstd[r] * (dy[r, :] * weight - xhat[r, :] * mean_j(dy[r, j] * weight[j] * xhat[r, j]))
// dx and dweight are overwritten. dweight sums rows in a fixed order of fixed
// blocks, so it does not depend on the thread count. With
// `accumulate_dweight`, the sum (rounded to T) is added to what dweight holds
// instead (dweight += result), so gradients of several micro-batches sum in
// the caller's buffer; dx is overwritten either way.
//
// With `dx_addend` (a [rows, dim] array, nullptr for none), dx = the result
// above + dx_addend: autodiff's sum of the residual stream's gradient with the
// gradient through the norm, folded in (graph/fuse_rmsnorm_add.h). It is
// added in the arithmetic the rest of dx uses (T here, fp32 on the GPU)
// before dx is stored, so a bf16 dx is rounded once, not twice as by a
// separate add. dx_addend must not overlap dx.
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, int64_t rows, int64_t dim,
                     double eps);

template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const T* weight, const T* rstd, T* dx, T* dweight,
                      int64_t rows, int64_t dim, bool accumulate_dweight = false,
                      const T* dx_addend = nullptr);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU: the contract above with bf16 x, weight, y, dy, dx, dx_addend and fp32
// rstd and dweight; sums run in fp32 (dx + dx_addend too, rounded to bf16
// once). One block per row (forward) or per fixed block of rows (backward),
// reading 8 bf16 at a time when dim % 8 == 0 and every pointer is 16-byte
// aligned, one at a time otherwise.
void rmsnorm_forward_cuda(const bf16* x, const bf16* weight, bf16* y, float* rstd, int64_t rows,
                          int64_t dim, float eps, cudaStream_t stream);

// Device workspace rmsnorm_backward_cuda needs: one fp32 row of partial
// dweight sums per block of rows.
uint64_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim);

// dweight (overwritten, or added to with `accumulate_dweight`) is reduced in
// two fixed-order stages, so it is bitwise the same run to run and GPU to
// GPU: each block of rows (its size fixed by `rows` alone) sums its rows in
// order into the workspace, then the block partials are summed in block
// order, within 32 fixed segments and the segments in order. dim * 4 bytes
// (rounded up to a whole number of vectors per thread) must fit in a
// block's shared memory.
void rmsnorm_backward_cuda(const bf16* dy, const bf16* x, const bf16* weight, const float* rstd,
                           bf16* dx, float* dweight, int64_t rows, int64_t dim, void* workspace,
                           cudaStream_t stream, bool accumulate_dweight = false,
                           const bf16* dx_addend = nullptr);

}  // namespace spillway::ops
#endif

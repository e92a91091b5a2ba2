// Softmax cross-entropy over the vocabulary, fused: softmax is never stored.
//
// Contract: logits [rows, vocab]; targets [rows] (int32; a negative target,
// such as Hugging Face's -100, marks a row that does not count);
// lse [rows] (log-sum-exp of each row, written by forward for backward);
// loss: one element, the mean over counted rows of lse[r] - logits[r, target[r]]
// (0 when no row counts). A target >= vocab throws Error("cross_entropy", ...)
// naming the row and the target. The mean is summed in double in row order.
//
// Weighted (weights [rows], not null): the per-token loss mask. The loss is
// then the sum over counted rows of weights[r] * (lse[r] - logits[r, target[r]]),
// with no division: the caller folds the normalization into the weights.
// Training puts 1/N on every counted token of an optimizer step, N counting
// the tokens of all its micro-batches on all its ranks (train/loss_weights.h),
// so that summed micro-batch gradients are those of one big batch even when
// micro-batches count different numbers of tokens. A row whose target is
// negative still counts nothing and its weight is not read. The weights take
// no gradient.
//
// Backward, dloss one element:
//   dlogits[r, :] = dloss / counted * (softmax(logits[r, :]) - onehot(target[r]))
//   (weighted: dloss * weights[r] * (...)) and zero for rows that do not
//   count. dlogits is overwritten.
//
// Forward and backward in one call, for the training step's loss, whose
// dloss is a constant known when the graph is built (graph/fuse_loss_gradient.h):
// each row is read while it is still in cache to write its gradient, so the
// logits are read from memory once and are dead after the loss. dloss is
// rounded to T first, as the seed gradient's fill rounds it, so lse, loss and
// dlogits equal those of cross_entropy_forward then cross_entropy_backward bit
// for bit. dlogits may be logits itself (each element is read before it is
// written), which saves the step a logits-sized buffer, but must not
// otherwise overlap it.
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, T* loss, int64_t rows,
                           int64_t vocab, const T* weights = nullptr);

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, const T* dloss,
                            T* dlogits, int64_t rows, int64_t vocab, const T* weights = nullptr);

template <typename T>
void cross_entropy_forward_backward(const T* logits, const int32_t* targets, double dloss, T* lse, T* loss,
                                    T* dlogits, int64_t rows, int64_t vocab, const T* weights = nullptr);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU: bf16 logits and dlogits; lse, loss, dloss and the weights (null:
// the mean over counted rows) fp32 in device memory.
// Each row is streamed once by one block with an online max / sum-exp in fp32,
// so no fp32 copy of the logits is ever made. A kernel cannot throw, so a
// target >= vocab makes its row's loss NaN (hence the mean NaN) and its
// dlogits row NaN, where the CPU throws.
//
// Device workspace cross_entropy_forward_cuda needs: one fp32 loss per row,
// which a single block then sums in a fixed order (in double).
uint64_t cross_entropy_forward_workspace_bytes(int64_t rows);

void cross_entropy_forward_cuda(const bf16* logits, const int32_t* targets, float* lse,
                                float* loss, int64_t rows, int64_t vocab, void* workspace,
                                cudaStream_t stream, const float* weights = nullptr);
void cross_entropy_backward_cuda(const bf16* logits, const int32_t* targets, const float* lse,
                                 const float* dloss, bf16* dlogits, int64_t rows, int64_t vocab,
                                 cudaStream_t stream, const float* weights = nullptr);

// The fused pair: loss and lse bit for bit those of cross_entropy_forward_cuda,
// dlogits those of cross_entropy_backward_cuda reading this dloss. Each block
// takes rows in turn: one pass over a row for its lse, a second that re-reads
// it for the gradient; the grid holds no more rows at once than half the L2
// cache takes, so the second pass reads from L2, not device memory. A target
// >= vocab gives NaN as the separate kernels do. The workspace holds the
// per-row losses, as the forward's does.
uint64_t cross_entropy_forward_backward_workspace_bytes(int64_t rows);
// `blocks` (0: chosen from the L2 size) sets how many rows are in flight
// between their two passes; a benchmark sweeps it.
void cross_entropy_forward_backward_cuda(const bf16* logits, const int32_t* targets, float dloss, float* lse,
                                         float* loss, bf16* dlogits, int64_t rows, int64_t vocab, void* workspace,
                                         cudaStream_t stream, int blocks = 0, const float* weights = nullptr);

}  // namespace spillway::ops
#endif

// The model's head and its loss over chunks of rows: logits = h W^T, the
// cross-entropy of the logits, and (training) dh = dlogits W and
// dW (+)= dlogits^T h, made `chunk_rows` rows at a time in one scratch
// buffer, so that no [rows, vocab] tensor ever exists whole. At LLaMA-3's
// vocabulary of 128,256 a sequence of 131,072 tokens has 31 GiB of bf16
// logits, which the unchunked step holds at once (and its gradient beside
// them where they cannot share memory).
//
// Contract: h [rows, hidden], W [vocab, hidden], targets [rows] (int32, a
// negative target counts nothing), weights [rows] or none, as
// ops/cross_entropy.h's. Outputs: loss (one element), lse [rows], and with
// the backward dh [rows, hidden] (h's dtype) and dW [vocab, hidden] (the
// accumulation dtype; added into when the node accumulates). dloss is a
// constant, as the fused loss gradient's (graph/fuse_loss_gradient.h).
//
// The unweighted mean is taken as weights of 1/counted on the counted rows
// (counted over all rows, before the first chunk), so each chunk's loss and
// gradient are its rows' share of the whole; the chunks' losses are summed in
// chunk order, in double. Within a chunk the kernels are cross_entropy's and
// matmul's; dW sums the chunks' products in fp32 in chunk order. Against one
// unchunked pass this differs by rounding alone (a weight of 1/counted
// against a division by counted; dW's sum split at the chunks).
#pragma once

#include <cstdint>

namespace spillway::ops {

// The weights that make the weighted loss the mean over counted rows:
// 1/counted where targets[r] >= 0, else 0.
template <typename T>
void mean_loss_weights(const int32_t* targets, int64_t rows, T* weights);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

namespace spillway::ops {

// The same on the GPU, in one block (the counted rows summed in a fixed order).
void mean_loss_weights_cuda(const int32_t* targets, int64_t rows, float* weights, cudaStream_t stream);
// out[0] = the sum of parts[0..n) in order, in double, rounded to float.
void sum_in_order_cuda(const float* parts, int64_t n, float* out, cudaStream_t stream);

}  // namespace spillway::ops
#endif

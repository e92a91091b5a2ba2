// AdamW with decoupled weight decay, the same arithmetic as torch.optim.AdamW.
//
// Contract, for each of n elements, with t = hp.step (counting from 1):
//   g  = grad * grad_scale
//   p  = p * (1 - lr * weight_decay)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// param, m, v are updated in place; grad is read. grad_scale folds the mean
// over micro-batches (grad holds their sum) and gradient clipping into the
// update, so neither needs a pass over the gradients of its own; it enters
// the arithmetic rounded to T like the other scalars.
//
// adamw_update_bf16_moments keeps m and v in bf16 to halve the optimizer
// state: each m[i], v[i] is widened exactly to fp32, the step is
// adamw_update<float>'s arithmetic operation for operation, and the parameter
// update uses this step's *unrounded* fp32 m and v; only then are the new m
// and v rounded to bf16 (to nearest even, NaN kept a NaN: base/dtype.h's
// to_bf16) and stored. So one step's parameter is bit for bit what
// adamw_update<float> gives from fp32 moments equal to the widened bf16 ones;
// the rounding of the moments shows from the next step on.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace spillway::ops {

struct AdamWHyper {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;
  double grad_scale = 1.0;
};

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWHyper& hp);

void adamw_update_bf16_moments(float* param, const float* grad, bf16* m, bf16* v, int64_t n,
                               const AdamWHyper& hp);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

namespace spillway::ops {

// GPU: the same fp32 arithmetic as adamw_update<float>, operation for
// operation (the step's scalars are formed on the host in double and rounded
// to float; no multiply-add is fused), on fp32 master weights and moments.
// When param_bf16 is not null it also receives the updated parameter rounded
// to bf16, the copy the forward pass reads, rounded as ops/master_split.h
// rounds it (to nearest, ties away from zero), so that the engines keeping
// the master whole and those keeping it split train the same bits.
void adamw_update_cuda(float* param, const float* grad, float* m, float* v, bf16* param_bf16,
                       int64_t n, const AdamWHyper& hp, cudaStream_t stream);

// GPU adamw_update_bf16_moments: bit for bit the CPU function (unrounded
// moments in the update, then m and v rounded to bf16 as to_bf16 rounds),
// with the optional bf16 parameter copy as in adamw_update_cuda.
void adamw_update_bf16_moments_cuda(float* param, const float* grad, bf16* m, bf16* v,
                                    bf16* param_bf16, int64_t n, const AdamWHyper& hp,
                                    cudaStream_t stream);

// The two updates above on a master held split (ops/master_split.h): the
// master is joined from `working` and `remainder`, updated with the same
// arithmetic, and split back into them. Bit for bit what the fp32-master
// update gives on the joined master, with its bf16 copy in `working`.
void adamw_update_split_cuda(bf16* working, uint16_t* remainder, const float* grad, float* m, float* v, int64_t n,
                             const AdamWHyper& hp, cudaStream_t stream);
void adamw_update_split_bf16_moments_cuda(bf16* working, uint16_t* remainder, const float* grad, bf16* m, bf16* v,
                                          int64_t n, const AdamWHyper& hp, cudaStream_t stream);

}  // namespace spillway::ops
#endif

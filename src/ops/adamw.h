// AdamW with decoupled weight decay, the same arithmetic as torch.optim.AdamW.
//
// Contract, for each of n elements, with t = hp.step (counting from 1):
//   p  = p * (1 - lr * weight_decay)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// param, m, v are updated in place; grad is read.
#pragma once

#include <cstdint>

namespace spillway::ops {

struct AdamWHyper {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;
};

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWHyper& hp);

}  // namespace spillway::ops

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
// blocks, so it does not depend on the thread count.
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, int64_t rows, int64_t dim,
                     double eps);

template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const T* weight, const T* rstd, T* dx, T* dweight,
                      int64_t rows, int64_t dim);

}  // namespace spillway::ops

#include "ops/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace spillway::ops {

namespace {

// dweight is reduced over rows in blocks of a size fixed by the row count
// alone (never by the thread count), at most kMaxBlocks of them, each summed
// in row order and then added up in block order.
constexpr int64_t kMinBlockRows = 16;
constexpr int64_t kMaxBlocks = 256;
constexpr int64_t kColumnChunk = 256;

int64_t block_rows(int64_t rows) {
  return std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
}

}  // namespace

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, int64_t rows, int64_t dim,
                     double eps) {
#pragma omp parallel for schedule(static) if (rows * dim > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    double sum_sq = 0;
    for (int64_t j = 0; j < dim; ++j) sum_sq += static_cast<double>(xr[j]) * xr[j];
    T inv = static_cast<T>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
    rstd[r] = inv;
    for (int64_t j = 0; j < dim; ++j) yr[j] = weight[j] * (xr[j] * inv);
  }
}

template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const T* weight, const T* rstd, T* dx, T* dweight,
                      int64_t rows, int64_t dim, bool accumulate_dweight, const T* dx_addend) {
  const int64_t per_block = block_rows(rows);
  const int64_t blocks = (rows + per_block - 1) / per_block;
  std::vector<double> partial(static_cast<size_t>(blocks * dim), 0.0);

#pragma omp parallel for schedule(static) if (rows * dim > (1 << 15))
  for (int64_t b = 0; b < blocks; ++b) {
    double* dw = partial.data() + b * dim;
    const int64_t end = std::min(rows, (b + 1) * per_block);
    for (int64_t r = b * per_block; r < end; ++r) {
      const T* dyr = dy + r * dim;
      const T* xr = x + r * dim;
      T* dxr = dx + r * dim;
      const T inv = rstd[r];
      double mean_dot = 0;  // mean_j(dy * weight * xhat)
      for (int64_t j = 0; j < dim; ++j) {
        const T xhat = xr[j] * inv;
        mean_dot += static_cast<double>(dyr[j] * weight[j]) * xhat;
        dw[j] += static_cast<double>(dyr[j]) * xhat;
      }
      const T c = static_cast<T>(mean_dot / static_cast<double>(dim));
      if (dx_addend) {
        const T* ar = dx_addend + r * dim;
        for (int64_t j = 0; j < dim; ++j) {
          dxr[j] = inv * (dyr[j] * weight[j] - (xr[j] * inv) * c) + ar[j];
        }
      } else {
        for (int64_t j = 0; j < dim; ++j) {
          dxr[j] = inv * (dyr[j] * weight[j] - (xr[j] * inv) * c);
        }
      }
    }
  }

  // Each thread owns whole column chunks and walks the blocks in order, so every
  // column's sum runs in block order and reads the partials row by row.
  const int64_t chunks = (dim + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (blocks * dim > (1 << 15))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kColumnChunk;
    const int64_t width = std::min(kColumnChunk, dim - begin);
    double sum[kColumnChunk] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const double* p = partial.data() + b * dim + begin;
      for (int64_t j = 0; j < width; ++j) sum[j] += p[j];
    }
    if (accumulate_dweight) {
      for (int64_t j = 0; j < width; ++j) dweight[begin + j] += static_cast<T>(sum[j]);
    } else {
      for (int64_t j = 0; j < width; ++j) dweight[begin + j] = static_cast<T>(sum[j]);
    }
  }
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, int64_t, int64_t,
                                     double);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*, int64_t,
                                      int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                      float*, float*, int64_t, int64_t, bool, const float*);
template void rmsnorm_backward<double>(const double*, const double*, const double*,
                                       const double*, double*, double*, int64_t, int64_t, bool,
                                       const double*);

}  // namespace spillway::ops

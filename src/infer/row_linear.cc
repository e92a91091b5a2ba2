#include "infer/row_linear.h"

namespace spillway::infer {

float dot_fixed_order(const float* a, const float* b, int64_t n) {
  // 16 independent partial sums (one AVX-512 register, two AVX ones), folded
  // in a fixed tree: vectorizable without letting the compiler reassociate.
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

void linear_rows(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out) {
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < out; ++o) {
    const float* wo = w + o * in;
    for (int64_t r = 0; r < rows; ++r) y[r * out + o] = dot_fixed_order(x + r * in, wo, in);
  }
}

}  // namespace spillway::infer

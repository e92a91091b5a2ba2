#include "ops/swiglu.h"

#include <cmath>

namespace spillway::ops {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

template <typename T>
void swiglu_forward(const T* gate, const T* up, T* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    out[i] = g / (T(1) + std::exp(-g)) * up[i];
  }
}

template <typename T>
void swiglu_backward(const T* dout, const T* gate, const T* up, T* dgate, T* dup, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    const T s = T(1) / (T(1) + std::exp(-g));
    dgate[i] = dout[i] * up[i] * s * (T(1) + g * (T(1) - s));
    dup[i] = dout[i] * g * s;
  }
}

template void swiglu_forward<float>(const float*, const float*, float*, int64_t);
template void swiglu_forward<double>(const double*, const double*, double*, int64_t);
template void swiglu_backward<float>(const float*, const float*, const float*, float*, float*,
                                     int64_t);
template void swiglu_backward<double>(const double*, const double*, const double*, double*,
                                      double*, int64_t);

}  // namespace spillway::ops

#include "ops/add.h"

namespace spillway::ops {

namespace {
constexpr int64_t kParallelMin = 1 << 16;
}  // namespace

// out may alias a or b: each element is read before it is written, at the same index.
template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, bool accumulate) {
  if (accumulate) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] += a[i] + b[i];
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void accumulate(T* dst, const T* src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

template void add<float>(const float*, const float*, float*, int64_t, bool);
template void add<double>(const double*, const double*, double*, int64_t, bool);
template void accumulate<float>(float*, const float*, int64_t);
template void accumulate<double>(double*, const double*, int64_t);

}  // namespace spillway::ops

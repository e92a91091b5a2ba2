#include "ops/dropout.h"

#include <initializer_list>

namespace spillway::ops {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

uint64_t dropout_micro_batch_key(uint64_t seed, int64_t step, int64_t micro_batch) {
  // Two rounds of the element draw's mix: keys of neighbouring steps and
  // micro-batches share no structure the element index could line up with.
  uint64_t z = seed;
  for (uint64_t word : {static_cast<uint64_t>(step), static_cast<uint64_t>(micro_batch)}) {
    z += 0x9E3779B97F4A7C15ull * (word + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return z;
}

template <typename T>
void dropout_forward(const T* x, T* out, int64_t n, uint64_t key, uint32_t salt, uint32_t threshold, double scale) {
  const T s = static_cast<T>(scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = dropout_keeps(key, salt, static_cast<uint64_t>(i), threshold) ? x[i] * s : T(0);
  }
}

template void dropout_forward<float>(const float*, float*, int64_t, uint64_t, uint32_t, uint32_t, double);
template void dropout_forward<double>(const double*, double*, int64_t, uint64_t, uint32_t, uint32_t, double);

}  // namespace spillway::ops

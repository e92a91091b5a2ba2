#include "ops/swiglu.h"

#include <cmath>

#include "ops/simd_cpu.h"

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

// The float kernels take the sigmoid through the vectorizing exp_float, since
// std::exp keeps the loop scalar; SiLU is a large share of a small model's step.
template <>
void swiglu_forward<float>(const float* gate, const float* up, float* out, int64_t n) {
  using V = Simd<float>;
  const int64_t vectors = n / V::kLanes;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t v = 0; v < vectors; ++v) {
    const int64_t i = v * V::kLanes;
    const FloatVec g = V::load(gate + i);
    V::store(out + i, g / (1.0f + exp_float(-g)) * V::load(up + i));
  }
  for (int64_t i = vectors * V::kLanes; i < n; ++i) out[i] = gate[i] / (1.0f + exp_float(-gate[i])) * up[i];
}

template <>
void swiglu_backward<float>(const float* dout, const float* gate, const float* up, float* dgate, float* dup,
                            int64_t n) {
  using V = Simd<float>;
  auto step = [](auto d, auto g, auto u, auto& dg, auto& du) {
    const auto s = 1.0f / (1.0f + exp_float(-g));
    dg = d * u * s * (1.0f + g * (1.0f - s));
    du = d * g * s;
  };
  const int64_t vectors = n / V::kLanes;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t v = 0; v < vectors; ++v) {
    const int64_t i = v * V::kLanes;
    FloatVec dg, du;
    step(V::load(dout + i), V::load(gate + i), V::load(up + i), dg, du);
    V::store(dgate + i, dg);
    V::store(dup + i, du);
  }
  for (int64_t i = vectors * V::kLanes; i < n; ++i) step(dout[i], gate[i], up[i], dgate[i], dup[i]);
}

// Row by row through the kernels above, so the packed results are theirs bit for bit.
template <typename T>
void swiglu_packed_forward(const T* gate_up, T* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    swiglu_forward(gate_up + 2 * r * cols, gate_up + (2 * r + 1) * cols, out + r * cols, cols);
  }
}

template <typename T>
void swiglu_packed_backward(const T* dout, const T* gate_up, T* dgate_up, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    swiglu_backward(dout + r * cols, gate_up + 2 * r * cols, gate_up + (2 * r + 1) * cols, dgate_up + 2 * r * cols,
                    dgate_up + (2 * r + 1) * cols, cols);
  }
}

template void swiglu_forward<double>(const double*, const double*, double*, int64_t);
template void swiglu_backward<double>(const double*, const double*, const double*, double*,
                                      double*, int64_t);

template void swiglu_packed_forward<float>(const float*, float*, int64_t, int64_t);
template void swiglu_packed_forward<double>(const double*, double*, int64_t, int64_t);
template void swiglu_packed_backward<float>(const float*, const float*, float*, int64_t, int64_t);
template void swiglu_packed_backward<double>(const double*, const double*, double*, int64_t, int64_t);

}  // namespace spillway::ops

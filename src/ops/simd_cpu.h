// Vector helpers for the CPU kernels: g++ vector types as wide as the build's
// widest register, and an exp in float that vectorizes (std::exp and expf do
// not without -ffast-math). Softmaxes, SiLU and cross-entropy share them.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace spillway::ops {

// The widest vector register the build targets (SSE by default, AVX-512
// under SPILLWAY_NATIVE on this host), as a g++ vector type.
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif

template <typename T>
struct Simd {
  typedef T Vec __attribute__((vector_size(kVectorBytes)));
  static constexpr int64_t kLanes = kVectorBytes / sizeof(T);
  static Vec load(const T* p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, const Vec& v) { std::memcpy(p, &v, sizeof v); }
};

using FloatVec = Simd<float>::Vec;
typedef int32_t IntVec __attribute__((vector_size(kVectorBytes)));

inline int32_t truncate_to_int(float x) { return static_cast<int32_t>(x); }
inline IntVec truncate_to_int(FloatVec x) { return __builtin_convertvector(x, IntVec); }

// exp in float, to about one ulp for arguments up to 88: 2^n * e^r with
// r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2] and e^r from its degree-7 Taylor
// polynomial (truncation under 1e-8). Arguments above 88 give e^88.
// Arguments below -87, -inf included, give 0. F is float or FloatVec; the
// vector form is written out because g++ will not vectorize a loop with a
// float compare-and-select (or a call to expf) without -ffast-math.
template <typename F>
F exp_float(F x) {
  const F lowest = F{} + -87.0f;  // keeps 2^n a normal float
  const F highest = F{} + 88.0f;  // keeps 2^n finite
  const F round = F{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kLog2e = 1.44269504f;
  constexpr float kLn2High = 0.693359375f;    // 355/512, so n * kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4f;  // ln 2 - kLn2High
  F clamped = x < lowest ? lowest : x;
  clamped = clamped > highest ? highest : clamped;
  const F n = (clamped * kLog2e + round) - round;
  const F r = (clamped - n * kLn2High) - n * kLn2Low;
  F poly = F{} + 1.0f / 5040;
  poly = poly * r + 1.0f / 720;
  poly = poly * r + 1.0f / 120;
  poly = poly * r + 1.0f / 24;
  poly = poly * r + 1.0f / 6;
  poly = poly * r + 0.5f;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  // A NaN argument's n is NaN, whose conversion to int is undefined: 2^0
  // stands in (poly is NaN, and so is the result).
  const F defined_n = n == n ? n : F{};
  const F two_n = std::bit_cast<F>((truncate_to_int(defined_n) + 127) << 23);
  return x < lowest ? F{} : poly * two_n;
}

// out[i] = exp(in[i] - shift) for i < n.
inline void exp_shifted(const float* in, float shift, float* out, int64_t n) {
  using V = Simd<float>;
  const int64_t whole = n - n % V::kLanes;
  for (int64_t j = 0; j < whole; j += V::kLanes) V::store(out + j, exp_float(V::load(in + j) - shift));
  for (int64_t j = whole; j < n; ++j) out[j] = exp_float(in[j] - shift);
}

}  // namespace spillway::ops

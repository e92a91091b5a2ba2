#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/cuda_elementwise.cuh"
#include "ops/adamw.h"

namespace spillway::ops {

namespace {

using elementwise::kThreads;
using elementwise::launch_elementwise;
using elementwise::vector_head;

// The step's scalars, rounded to float as the CPU kernel rounds them.
struct AdamWScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, correction2_sqrt, eps, grad_scale;
};

// Moments stored as M and computed in float: float moves in float4; bf16
// widens exactly (bits << 16) and rounds as base/dtype.h's to_bf16 does (to
// nearest even, a NaN kept a quiet NaN with its sign), so both sides store the
// same bits.
__device__ inline float load_moment(float x) { return x; }
__device__ inline float load_moment(bf16 x) { return __uint_as_float(uint32_t(x.bits) << 16); }
__device__ inline uint32_t bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__device__ inline void store_moment(float& out, float x) { out = x; }
__device__ inline void store_moment(bf16& out, float x) { out.bits = uint16_t(bf16_bits(x)); }

__device__ inline float4 load_moments4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ inline float4 load_moments4(const bf16* p) {
  const uint2 packed = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(packed.x << 16), __uint_as_float(packed.x & 0xffff0000u),
                     __uint_as_float(packed.y << 16), __uint_as_float(packed.y & 0xffff0000u));
}
__device__ inline void store_moments4(float* p, float4 x) { *reinterpret_cast<float4*>(p) = x; }
__device__ inline void store_moments4(bf16* p, float4 x) {
  const uint2 packed{bf16_bits(x.x) | (bf16_bits(x.y) << 16), bf16_bits(x.z) | (bf16_bits(x.w) << 16)};
  *reinterpret_cast<uint2*>(p) = packed;
}

// adamw_cpu.cc's expressions in its evaluation order, each operation rounded
// on its own (the _rn intrinsics are never fused into multiply-adds), so the
// GPU and the CPU agree to the last bit wherever the CPU does not fuse either.
// The parameter update uses the unrounded new moments, as on the CPU.
template <typename M>
struct AdamWStep {
  float* param;
  const float* grad;
  M* m;
  M* v;
  __nv_bfloat16* param_bf16;
  AdamWScalars s;

  __device__ float update(float& p, float grad, float& mi, float& vi) const {
    const float g = __fmul_rn(grad, s.grad_scale);
    const float decayed = __fmul_rn(p, s.decay);
    mi = __fadd_rn(__fmul_rn(s.beta1, mi), __fmul_rn(s.one_minus_beta1, g));
    vi = __fadd_rn(__fmul_rn(s.beta2, vi), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.correction2_sqrt), s.eps);
    p = __fsub_rn(decayed, __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
    return p;
  }
  __device__ void vector(int64_t i) const {
    float4 p = *reinterpret_cast<const float4*>(param + i);
    const float4 g = *reinterpret_cast<const float4*>(grad + i);
    float4 mi = load_moments4(m + i);
    float4 vi = load_moments4(v + i);
    update(p.x, g.x, mi.x, vi.x);
    update(p.y, g.y, mi.y, vi.y);
    update(p.z, g.z, mi.z, vi.z);
    update(p.w, g.w, mi.w, vi.w);
    *reinterpret_cast<float4*>(param + i) = p;
    store_moments4(m + i, mi);
    store_moments4(v + i, vi);
    if (param_bf16 != nullptr) {
      uint2 packed;
      *reinterpret_cast<__nv_bfloat162*>(&packed.x) = __floats2bfloat162_rn(p.x, p.y);
      *reinterpret_cast<__nv_bfloat162*>(&packed.y) = __floats2bfloat162_rn(p.z, p.w);
      *reinterpret_cast<uint2*>(param_bf16 + i) = packed;
    }
  }
  __device__ void scalar(int64_t i) const {
    float p = param[i], mi = load_moment(m[i]), vi = load_moment(v[i]);
    update(p, grad[i], mi, vi);
    param[i] = p;
    store_moment(m[i], mi);
    store_moment(v[i], vi);
    if (param_bf16 != nullptr) param_bf16[i] = __float2bfloat16_rn(p);
  }
};

// One kernel template, two instantiations: fp32 moments (float4 per vector)
// and bf16 moments (4 x 16 bits per vector).
template <typename M>
void launch_adamw(float* param, const float* grad, M* m, M* v, bf16* param_bf16, int64_t n,
                  const AdamWHyper& hp, cudaStream_t stream) {
  SPW_CHECK(hp.step >= 1, "adamw", "step counts from 1, got ", hp.step);
  const double t = static_cast<double>(hp.step);
  const AdamWScalars s{
      static_cast<float>(1.0 - hp.lr * hp.weight_decay),
      static_cast<float>(hp.beta1),
      static_cast<float>(1.0 - hp.beta1),
      static_cast<float>(hp.beta2),
      static_cast<float>(1.0 - hp.beta2),
      static_cast<float>(hp.lr / (1.0 - std::pow(hp.beta1, t))),
      static_cast<float>(std::sqrt(1.0 - std::pow(hp.beta2, t))),
      static_cast<float>(hp.eps),
      static_cast<float>(hp.grad_scale),
  };
  const AdamWStep<M> op{param, grad, m, v, reinterpret_cast<__nv_bfloat16*>(param_bf16), s};
  constexpr int kMoment = static_cast<int>(sizeof(M));
  launch_elementwise<4>(
      "adamw", op, n,
      vector_head({{param, 4}, {grad, 4}, {m, kMoment}, {v, kMoment}, {param_bf16, 2}}, 4),
      stream);
}

}  // namespace

void adamw_update_cuda(float* param, const float* grad, float* m, float* v, bf16* param_bf16,
                       int64_t n, const AdamWHyper& hp, cudaStream_t stream) {
  launch_adamw<float>(param, grad, m, v, param_bf16, n, hp, stream);
}

void adamw_update_bf16_moments_cuda(float* param, const float* grad, bf16* m, bf16* v,
                                    bf16* param_bf16, int64_t n, const AdamWHyper& hp,
                                    cudaStream_t stream) {
  launch_adamw<bf16>(param, grad, m, v, param_bf16, n, hp, stream);
}

}  // namespace spillway::ops

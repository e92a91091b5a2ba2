#include <cuda_bf16.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/cuda_elementwise.cuh"
#include "ops/adamw.h"
#include "ops/master_split.h"

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

// Where the master weight lives: FloatMaster reads and writes fp32, and
// writes the optional bf16 working copy beside it; SplitMaster holds it as
// the working copy plus a remainder (ops/master_split.h). Both round the
// working copy the one way (ties away from zero), so the engines that keep
// the master either way train the same bits.
struct FloatMaster {
  float* param;
  uint16_t* working;  // null: no copy wanted

  __device__ float4 load4(int64_t i) const { return *reinterpret_cast<const float4*>(param + i); }
  __device__ void store4(int64_t i, float4 p) const {
    *reinterpret_cast<float4*>(param + i) = p;
    if (working != nullptr) *reinterpret_cast<uint2*>(working + i) = split_master4(p).working;
  }
  __device__ float load(int64_t i) const { return param[i]; }
  __device__ void store(int64_t i, float p) const {
    param[i] = p;
    if (working != nullptr) working[i] = split_master_bits(__float_as_uint(p)).working;
  }
};

struct SplitMaster {
  uint16_t* working;
  uint16_t* remainder;

  __device__ float4 load4(int64_t i) const {
    const uint2 w = *reinterpret_cast<const uint2*>(working + i);
    const uint2 r = *reinterpret_cast<const uint2*>(remainder + i);
    auto join = [](uint32_t w2, uint32_t r2, int half) {
      return __uint_as_float(join_master_bits(uint16_t(w2 >> (16 * half)), uint16_t(r2 >> (16 * half))));
    };
    return make_float4(join(w.x, r.x, 0), join(w.x, r.x, 1), join(w.y, r.y, 0), join(w.y, r.y, 1));
  }
  __device__ void store4(int64_t i, float4 p) const {
    const MasterHalves4 h = split_master4(p);
    *reinterpret_cast<uint2*>(working + i) = h.working;
    *reinterpret_cast<uint2*>(remainder + i) = h.remainder;
  }
  __device__ float load(int64_t i) const { return __uint_as_float(join_master_bits(working[i], remainder[i])); }
  __device__ void store(int64_t i, float p) const {
    const MasterHalves h = split_master_bits(__float_as_uint(p));
    working[i] = h.working;
    remainder[i] = h.remainder;
  }
};

// adamw_cpu.cc's expressions in its evaluation order, each operation rounded
// on its own (the _rn intrinsics are never fused into multiply-adds), so the
// GPU and the CPU agree to the last bit wherever the CPU does not fuse either.
// The parameter update uses the unrounded new moments, as on the CPU.
template <typename M, typename Master>
struct AdamWStep {
  Master master;
  const float* grad;
  M* m;
  M* v;
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
    float4 p = master.load4(i);
    const float4 g = *reinterpret_cast<const float4*>(grad + i);
    float4 mi = load_moments4(m + i);
    float4 vi = load_moments4(v + i);
    update(p.x, g.x, mi.x, vi.x);
    update(p.y, g.y, mi.y, vi.y);
    update(p.z, g.z, mi.z, vi.z);
    update(p.w, g.w, mi.w, vi.w);
    master.store4(i, p);
    store_moments4(m + i, mi);
    store_moments4(v + i, vi);
  }
  __device__ void scalar(int64_t i) const {
    float p = master.load(i), mi = load_moment(m[i]), vi = load_moment(v[i]);
    update(p, grad[i], mi, vi);
    master.store(i, p);
    store_moment(m[i], mi);
    store_moment(v[i], vi);
  }
};

// One kernel template, four instantiations: fp32 or bf16 moments (float4 or
// 4 x 16 bits per vector), fp32 or split master.
template <typename M, typename Master>
void launch_adamw(const Master& master, std::array<std::pair<const void*, int>, 2> at,
                  const float* grad, M* m, M* v, int64_t n, const AdamWHyper& hp, cudaStream_t stream) {
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
  const AdamWStep<M, Master> op{master, grad, m, v, s};
  constexpr int kMoment = static_cast<int>(sizeof(M));
  launch_elementwise<4>("adamw", op, n, vector_head({at[0], at[1], {grad, 4}, {m, kMoment}, {v, kMoment}}, 4), stream);
}

}  // namespace

void adamw_update_cuda(float* param, const float* grad, float* m, float* v, bf16* param_bf16,
                       int64_t n, const AdamWHyper& hp, cudaStream_t stream) {
  launch_adamw(FloatMaster{param, reinterpret_cast<uint16_t*>(param_bf16)}, {{{param, 4}, {param_bf16, 2}}}, grad, m,
               v, n, hp, stream);
}

void adamw_update_bf16_moments_cuda(float* param, const float* grad, bf16* m, bf16* v,
                                    bf16* param_bf16, int64_t n, const AdamWHyper& hp,
                                    cudaStream_t stream) {
  launch_adamw(FloatMaster{param, reinterpret_cast<uint16_t*>(param_bf16)}, {{{param, 4}, {param_bf16, 2}}}, grad, m,
               v, n, hp, stream);
}

void adamw_update_split_cuda(bf16* working, uint16_t* remainder, const float* grad, float* m, float* v, int64_t n,
                             const AdamWHyper& hp, cudaStream_t stream) {
  launch_adamw(SplitMaster{reinterpret_cast<uint16_t*>(working), remainder}, {{{working, 2}, {remainder, 2}}}, grad, m,
               v, n, hp, stream);
}

void adamw_update_split_bf16_moments_cuda(bf16* working, uint16_t* remainder, const float* grad, bf16* m, bf16* v,
                                          int64_t n, const AdamWHyper& hp, cudaStream_t stream) {
  launch_adamw(SplitMaster{reinterpret_cast<uint16_t*>(working), remainder}, {{{working, 2}, {remainder, 2}}}, grad, m,
               v, n, hp, stream);
}

}  // namespace spillway::ops

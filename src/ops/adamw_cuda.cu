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

// adamw_cpu.cc's expressions in its evaluation order, each operation rounded
// on its own (the _rn intrinsics are never fused into multiply-adds), so the
// GPU and the CPU agree to the last bit wherever the CPU does not fuse either.
struct AdamWStep {
  float* param;
  const float* grad;
  float* m;
  float* v;
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
    float4 mi = *reinterpret_cast<const float4*>(m + i);
    float4 vi = *reinterpret_cast<const float4*>(v + i);
    update(p.x, g.x, mi.x, vi.x);
    update(p.y, g.y, mi.y, vi.y);
    update(p.z, g.z, mi.z, vi.z);
    update(p.w, g.w, mi.w, vi.w);
    *reinterpret_cast<float4*>(param + i) = p;
    *reinterpret_cast<float4*>(m + i) = mi;
    *reinterpret_cast<float4*>(v + i) = vi;
    if (param_bf16 != nullptr) {
      uint2 packed;
      *reinterpret_cast<__nv_bfloat162*>(&packed.x) = __floats2bfloat162_rn(p.x, p.y);
      *reinterpret_cast<__nv_bfloat162*>(&packed.y) = __floats2bfloat162_rn(p.z, p.w);
      *reinterpret_cast<uint2*>(param_bf16 + i) = packed;
    }
  }
  __device__ void scalar(int64_t i) const {
    float p = param[i], mi = m[i], vi = v[i];
    update(p, grad[i], mi, vi);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (param_bf16 != nullptr) param_bf16[i] = __float2bfloat16_rn(p);
  }
};

}  // namespace

void adamw_update_cuda(float* param, const float* grad, float* m, float* v, bf16* param_bf16,
                       int64_t n, const AdamWHyper& hp, cudaStream_t stream) {
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
  const AdamWStep op{param, grad, m, v, reinterpret_cast<__nv_bfloat16*>(param_bf16), s};
  launch_elementwise<4>("adamw", op, n,
                        vector_head({{param, 4}, {grad, 4}, {m, 4}, {v, 4}, {param_bf16, 2}}, 4),
                        stream);
}

}  // namespace spillway::ops

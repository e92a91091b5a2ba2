#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/cuda_elementwise.cuh"
#include "ops/swiglu.h"

namespace spillway::ops {

namespace {

using elementwise::kThreads;
using elementwise::launch_elementwise;
using elementwise::vector_head;

// Eight bf16 at a time, widened to fp32 and narrowed back once.
struct Bf16x8 {
  float f[8];
};

__device__ inline Bf16x8 load8(const __nv_bfloat16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  Bf16x8 out;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 v = __bfloat1622float2(h[k]);
    out.f[2 * k] = v.x;
    out.f[2 * k + 1] = v.y;
  }
  return out;
}

__device__ inline void store8(__nv_bfloat16* p, const Bf16x8& v) {
  uint4 raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(v.f[2 * k], v.f[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

__device__ inline float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

struct SwigluForward {
  const __nv_bfloat16* gate;
  const __nv_bfloat16* up;
  __nv_bfloat16* out;

  __device__ void vector(int64_t i) const {
    const Bf16x8 g = load8(gate + i);
    const Bf16x8 u = load8(up + i);
    Bf16x8 o;
#pragma unroll
    for (int k = 0; k < 8; ++k) o.f[k] = silu_times(g.f[k], u.f[k]);
    store8(out + i, o);
  }
  __device__ void scalar(int64_t i) const {
    out[i] = __float2bfloat16_rn(silu_times(__bfloat162float(gate[i]), __bfloat162float(up[i])));
  }
};

struct SwigluBackward {
  const __nv_bfloat16* dout;
  const __nv_bfloat16* gate;
  const __nv_bfloat16* up;
  __nv_bfloat16* dgate;
  __nv_bfloat16* dup;

  // The CPU kernel's expressions, in its order.
  __device__ static void grads(float d, float g, float u, float& dg, float& du) {
    const float s = 1.0f / (1.0f + expf(-g));
    dg = d * u * s * (1.0f + g * (1.0f - s));
    du = d * g * s;
  }
  __device__ void vector(int64_t i) const {
    const Bf16x8 d = load8(dout + i);
    const Bf16x8 g = load8(gate + i);
    const Bf16x8 u = load8(up + i);
    Bf16x8 dg, du;
#pragma unroll
    for (int k = 0; k < 8; ++k) grads(d.f[k], g.f[k], u.f[k], dg.f[k], du.f[k]);
    store8(dgate + i, dg);
    store8(dup + i, du);
  }
  __device__ void scalar(int64_t i) const {
    float dg, du;
    grads(__bfloat162float(dout[i]), __bfloat162float(gate[i]), __bfloat162float(up[i]), dg, du);
    dgate[i] = __float2bfloat16_rn(dg);
    dup[i] = __float2bfloat16_rn(du);
  }
};

}  // namespace

void swiglu_forward_cuda(const bf16* gate, const bf16* up, bf16* out, int64_t n,
                         cudaStream_t stream) {
  const SwigluForward op{reinterpret_cast<const __nv_bfloat16*>(gate),
                         reinterpret_cast<const __nv_bfloat16*>(up),
                         reinterpret_cast<__nv_bfloat16*>(out)};
  launch_elementwise<8>("swiglu", op, n, vector_head({{gate, 2}, {up, 2}, {out, 2}}, 8), stream);
}

void swiglu_backward_cuda(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate,
                          bf16* dup, int64_t n, cudaStream_t stream) {
  const SwigluBackward op{
      reinterpret_cast<const __nv_bfloat16*>(dout), reinterpret_cast<const __nv_bfloat16*>(gate),
      reinterpret_cast<const __nv_bfloat16*>(up), reinterpret_cast<__nv_bfloat16*>(dgate),
      reinterpret_cast<__nv_bfloat16*>(dup)};
  launch_elementwise<8>("swiglu", op, n,
                        vector_head({{dout, 2}, {gate, 2}, {up, 2}, {dgate, 2}, {dup, 2}}, 8),
                        stream);
}

}  // namespace spillway::ops

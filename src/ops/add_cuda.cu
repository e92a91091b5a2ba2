#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/cuda_elementwise.cuh"
#include "ops/add.h"

namespace spillway::ops {

namespace {

using elementwise::kThreads;
using elementwise::launch_elementwise;
using elementwise::vector_head;

// out = a + b, or with Accumulate out += a + b (the sum rounded to the
// element type first, as the CPU's T arithmetic rounds it).
template <bool Accumulate>
struct AddBf16 {
  const __nv_bfloat16* a;
  const __nv_bfloat16* b;
  __nv_bfloat16* out;

  __device__ static float combine(float old, float a, float b) {
    if constexpr (Accumulate) {
      return old + __bfloat162float(__float2bfloat16_rn(a + b));
    } else {
      return a + b;
    }
  }
  __device__ void vector(int64_t i) const {
    const uint4 ra = *reinterpret_cast<const uint4*>(a + i);
    const uint4 rb = *reinterpret_cast<const uint4*>(b + i);
    uint4 ro = make_uint4(0, 0, 0, 0);
    if constexpr (Accumulate) ro = *reinterpret_cast<const uint4*>(out + i);
    const auto* ha = reinterpret_cast<const __nv_bfloat162*>(&ra);
    const auto* hb = reinterpret_cast<const __nv_bfloat162*>(&rb);
    auto* hout = reinterpret_cast<__nv_bfloat162*>(&ro);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 fa = __bfloat1622float2(ha[k]);
      const float2 fb = __bfloat1622float2(hb[k]);
      const float2 fo = __bfloat1622float2(hout[k]);
      hout[k] = __floats2bfloat162_rn(combine(fo.x, fa.x, fb.x), combine(fo.y, fa.y, fb.y));
    }
    *reinterpret_cast<uint4*>(out + i) = ro;
  }
  __device__ void scalar(int64_t i) const {
    const float old = Accumulate ? __bfloat162float(out[i]) : 0.0f;
    out[i] = __float2bfloat16_rn(combine(old, __bfloat162float(a[i]), __bfloat162float(b[i])));
  }
};

template <bool Accumulate>
struct AddF32 {
  const float* a;
  const float* b;
  float* out;

  __device__ static float combine(float old, float a, float b) {
    if constexpr (Accumulate) {
      return __fadd_rn(old, __fadd_rn(a, b));
    } else {
      return a + b;
    }
  }
  __device__ void vector(int64_t i) const {
    const float4 fa = *reinterpret_cast<const float4*>(a + i);
    const float4 fb = *reinterpret_cast<const float4*>(b + i);
    float4 fo = make_float4(0, 0, 0, 0);
    if constexpr (Accumulate) fo = *reinterpret_cast<const float4*>(out + i);
    *reinterpret_cast<float4*>(out + i) = make_float4(combine(fo.x, fa.x, fb.x), combine(fo.y, fa.y, fb.y),
                                                      combine(fo.z, fa.z, fb.z), combine(fo.w, fa.w, fb.w));
  }
  __device__ void scalar(int64_t i) const { out[i] = combine(Accumulate ? out[i] : 0.0f, a[i], b[i]); }
};

}  // namespace

void add_cuda(const bf16* a, const bf16* b, bf16* out, int64_t n, cudaStream_t stream, bool accumulate) {
  const auto* ab = reinterpret_cast<const __nv_bfloat16*>(a);
  const auto* bb = reinterpret_cast<const __nv_bfloat16*>(b);
  auto* ob = reinterpret_cast<__nv_bfloat16*>(out);
  const int64_t head = vector_head({{a, 2}, {b, 2}, {out, 2}}, 8);
  if (accumulate) {
    launch_elementwise<8>("add", AddBf16<true>{ab, bb, ob}, n, head, stream);
  } else {
    launch_elementwise<8>("add", AddBf16<false>{ab, bb, ob}, n, head, stream);
  }
}

void add_cuda(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream, bool accumulate) {
  const int64_t head = vector_head({{a, 4}, {b, 4}, {out, 4}}, 4);
  if (accumulate) {
    launch_elementwise<4>("add", AddF32<true>{a, b, out}, n, head, stream);
  } else {
    launch_elementwise<4>("add", AddF32<false>{a, b, out}, n, head, stream);
  }
}

void accumulate_cuda(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  add_cuda(dst, src, dst, n, stream);
}

}  // namespace spillway::ops

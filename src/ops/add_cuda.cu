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

struct AddBf16 {
  const __nv_bfloat16* a;
  const __nv_bfloat16* b;
  __nv_bfloat16* out;

  __device__ void vector(int64_t i) const {
    const uint4 ra = *reinterpret_cast<const uint4*>(a + i);
    const uint4 rb = *reinterpret_cast<const uint4*>(b + i);
    const auto* ha = reinterpret_cast<const __nv_bfloat162*>(&ra);
    const auto* hb = reinterpret_cast<const __nv_bfloat162*>(&rb);
    uint4 ro;
    auto* hout = reinterpret_cast<__nv_bfloat162*>(&ro);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 fa = __bfloat1622float2(ha[k]);
      const float2 fb = __bfloat1622float2(hb[k]);
      hout[k] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
    }
    *reinterpret_cast<uint4*>(out + i) = ro;
  }
  __device__ void scalar(int64_t i) const {
    out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  }
};

struct AddF32 {
  const float* a;
  const float* b;
  float* out;

  __device__ void vector(int64_t i) const {
    const float4 fa = *reinterpret_cast<const float4*>(a + i);
    const float4 fb = *reinterpret_cast<const float4*>(b + i);
    *reinterpret_cast<float4*>(out + i) =
        make_float4(fa.x + fb.x, fa.y + fb.y, fa.z + fb.z, fa.w + fb.w);
  }
  __device__ void scalar(int64_t i) const { out[i] = a[i] + b[i]; }
};

}  // namespace

void add_cuda(const bf16* a, const bf16* b, bf16* out, int64_t n, cudaStream_t stream) {
  const AddBf16 op{reinterpret_cast<const __nv_bfloat16*>(a),
                   reinterpret_cast<const __nv_bfloat16*>(b),
                   reinterpret_cast<__nv_bfloat16*>(out)};
  launch_elementwise<8>("add", op, n, vector_head({{a, 2}, {b, 2}, {out, 2}}, 8), stream);
}

void add_cuda(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  launch_elementwise<4>("add", AddF32{a, b, out}, n, vector_head({{a, 4}, {b, 4}, {out, 4}}, 4),
                        stream);
}

void accumulate_cuda(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  add_cuda(dst, src, dst, n, stream);
}

}  // namespace spillway::ops

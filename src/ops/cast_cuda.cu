#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/cuda_elementwise.cuh"
#include "ops/cast.h"

namespace spillway::ops {

namespace {

using elementwise::kThreads;
using elementwise::launch_elementwise;
using elementwise::vector_head;

// base/dtype.h's to_bf16, bit for bit: nearest even, and a NaN keeps its sign
// and becomes quiet (cvt.rn.bf16.f32 would make every NaN the same one).
__device__ inline uint32_t bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

struct F32ToBf16 {
  const float* src;
  uint16_t* dst;

  __device__ void vector(int64_t i) const {
    const float4 lo = *reinterpret_cast<const float4*>(src + i);
    const float4 hi = *reinterpret_cast<const float4*>(src + i + 4);
    uint4 out;
    out.x = bf16_bits(lo.x) | (bf16_bits(lo.y) << 16);
    out.y = bf16_bits(lo.z) | (bf16_bits(lo.w) << 16);
    out.z = bf16_bits(hi.x) | (bf16_bits(hi.y) << 16);
    out.w = bf16_bits(hi.z) | (bf16_bits(hi.w) << 16);
    *reinterpret_cast<uint4*>(dst + i) = out;
  }
  __device__ void scalar(int64_t i) const { dst[i] = static_cast<uint16_t>(bf16_bits(src[i])); }
};

struct Bf16ToF32 {
  const uint16_t* src;
  float* dst;

  __device__ void vector(int64_t i) const {
    const uint4 in = *reinterpret_cast<const uint4*>(src + i);
    *reinterpret_cast<float4*>(dst + i) =
        make_float4(__uint_as_float(in.x << 16), __uint_as_float(in.x & 0xffff0000u),
                    __uint_as_float(in.y << 16), __uint_as_float(in.y & 0xffff0000u));
    *reinterpret_cast<float4*>(dst + i + 4) =
        make_float4(__uint_as_float(in.z << 16), __uint_as_float(in.z & 0xffff0000u),
                    __uint_as_float(in.w << 16), __uint_as_float(in.w & 0xffff0000u));
  }
  __device__ void scalar(int64_t i) const { dst[i] = __uint_as_float(uint32_t(src[i]) << 16); }
};

}  // namespace

void cast_cuda(const void* src, DType src_type, void* dst, DType dst_type, int64_t n,
               cudaStream_t stream) {
  const bool supported = (src_type == DType::f32 || src_type == DType::bf16) &&
                         (dst_type == DType::f32 || dst_type == DType::bf16);
  SPW_CHECK(supported, "cast", "cannot cast ", dtype_name(src_type), " to ", dtype_name(dst_type),
            " on the GPU (only f32 and bf16 convert there)");
  SPW_CHECK(n >= 0, "cast", "negative element count ", n);
  if (n == 0) return;
  if (src_type == dst_type) {
    if (src != dst) {
      SPW_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_type),
                               cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  if (src_type == DType::f32) {
    const F32ToBf16 op{static_cast<const float*>(src), static_cast<uint16_t*>(dst)};
    launch_elementwise<8>("cast", op, n, vector_head({{src, 4}, {dst, 2}}, 8), stream);
  } else {
    const Bf16ToF32 op{static_cast<const uint16_t*>(src), static_cast<float*>(dst)};
    launch_elementwise<8>("cast", op, n, vector_head({{src, 2}, {dst, 4}}, 8), stream);
  }
}

}  // namespace spillway::ops

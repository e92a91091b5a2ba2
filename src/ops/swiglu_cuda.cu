#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/cuda_elementwise.cuh"
#include "ops/swiglu.h"
#include "ops/swiglu_math.cuh"

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

using swiglu_math::silu_times;

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

  __device__ void vector(int64_t i) const {
    const Bf16x8 d = load8(dout + i);
    const Bf16x8 g = load8(gate + i);
    const Bf16x8 u = load8(up + i);
    Bf16x8 dg, du;
#pragma unroll
    for (int k = 0; k < 8; ++k) swiglu_math::grads(d.f[k], g.f[k], u.f[k], dg.f[k], du.f[k]);
    store8(dgate + i, dg);
    store8(dup + i, du);
  }
  __device__ void scalar(int64_t i) const {
    float dg, du;
    swiglu_math::grads(__bfloat162float(dout[i]), __bfloat162float(gate[i]), __bfloat162float(up[i]), dg, du);
    dgate[i] = __float2bfloat16_rn(dg);
    dup[i] = __float2bfloat16_rn(du);
  }
};

// A fused gate|up output [rows, 2 * cols]: element i of out (row i / cols)
// reads its gate at i + (i / cols) * cols and its up cols further on. The
// eight elements of a vector share a row when cols % 8 == 0.
__device__ inline int64_t gate_at(int64_t i, int64_t cols) { return i + (i / cols) * cols; }

struct SwigluPackedForward {
  const __nv_bfloat16* gate_up;
  __nv_bfloat16* out;
  int64_t cols;

  __device__ void vector(int64_t i) const {
    const int64_t g_at = gate_at(i, cols);
    SwigluForward{gate_up + g_at - i, gate_up + g_at + cols - i, out}.vector(i);
  }
  __device__ void scalar(int64_t i) const {
    const int64_t g_at = gate_at(i, cols);
    SwigluForward{gate_up + g_at - i, gate_up + g_at + cols - i, out}.scalar(i);
  }
};

struct SwigluPackedBackward {
  const __nv_bfloat16* dout;
  const __nv_bfloat16* gate_up;
  __nv_bfloat16* dgate_up;
  int64_t cols;

  // The unpacked op, its gate and up pointers shifted so that its index i lands on row i / cols.
  __device__ SwigluBackward at(int64_t i) const {
    const int64_t shift = gate_at(i, cols) - i;
    return SwigluBackward{dout, gate_up + shift, gate_up + shift + cols, dgate_up + shift, dgate_up + shift + cols};
  }
  __device__ void vector(int64_t i) const { at(i).vector(i); }
  __device__ void scalar(int64_t i) const { at(i).scalar(i); }
};

// The vector path needs every row's gate and up on 16-byte boundaries.
int64_t packed_head(int64_t cols, std::initializer_list<std::pair<const void*, int>> pointers) {
  return cols % 8 == 0 && vector_head(pointers, 8) == 0 ? 0 : -1;
}

}  // namespace

void swiglu_packed_forward_cuda(const bf16* gate_up, bf16* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  SPW_CHECK(rows >= 0 && cols > 0, "swiglu", "bad packed shape: ", rows, " rows of ", cols, " columns");
  const SwigluPackedForward op{reinterpret_cast<const __nv_bfloat16*>(gate_up),
                               reinterpret_cast<__nv_bfloat16*>(out), cols};
  launch_elementwise<8>("swiglu", op, rows * cols, packed_head(cols, {{gate_up, 2}, {out, 2}}), stream);
}

void swiglu_packed_backward_cuda(const bf16* dout, const bf16* gate_up, bf16* dgate_up, int64_t rows, int64_t cols,
                                 cudaStream_t stream) {
  SPW_CHECK(rows >= 0 && cols > 0, "swiglu", "bad packed shape: ", rows, " rows of ", cols, " columns");
  const SwigluPackedBackward op{reinterpret_cast<const __nv_bfloat16*>(dout),
                                reinterpret_cast<const __nv_bfloat16*>(gate_up),
                                reinterpret_cast<__nv_bfloat16*>(dgate_up), cols};
  launch_elementwise<8>("swiglu", op, rows * cols, packed_head(cols, {{dout, 2}, {gate_up, 2}, {dgate_up, 2}}),
                        stream);
}

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

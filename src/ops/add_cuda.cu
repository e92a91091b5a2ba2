#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/add.h"

namespace spillway::ops {

namespace {

constexpr int kThreads = 256;

// Elements to take one at a time before every pointer (address, element
// size) sits on a boundary of its vector's bytes (V elements, at most 16), so
// the rest can move in 16-byte loads; -1 when no count below V aligns them all.
// A null pointer (an output not asked for) constrains nothing.
int64_t vector_head(std::initializer_list<std::pair<const void*, int>> pointers, int v) {
  for (int head = 0; head < v; ++head) {
    bool aligned = true;
    for (const auto& [p, size] : pointers) {
      const int boundary = v * size < 16 ? v * size : 16;
      const uintptr_t at = reinterpret_cast<uintptr_t>(p) + uintptr_t(head) * size;
      if (p != nullptr && at % boundary != 0) aligned = false;
    }
    if (aligned) return head;
  }
  return -1;
}

// Thread i handles vector i of the aligned body and scalar i of the head and
// tail together (at most 2V - 2 of them); each element is read and written at
// its own index only, which is what lets out alias an input.
template <int V, typename Op>
__global__ void __launch_bounds__(kThreads)
    elementwise_kernel(Op op, int64_t n, int64_t head, int64_t vectors) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < vectors) op.vector(head + i * V);
  const int64_t tail = head + vectors * V;
  if (i < head) {
    op.scalar(i);
  } else if (i - head < n - tail) {
    op.scalar(tail + (i - head));
  }
}

template <int V, typename Op>
void launch_elementwise(const char* thing, const Op& op, int64_t n, int64_t head,
                        cudaStream_t stream) {
  SPW_CHECK(n >= 0, thing, "negative element count ", n);
  int64_t vectors = 0;
  if (head < 0 || head >= n) {
    head = n;
  } else {
    vectors = (n - head) / V;
  }
  const int64_t scalars = n - vectors * V;
  const int64_t threads = vectors > scalars ? vectors : scalars;
  if (threads == 0) return;
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  elementwise_kernel<V>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(op, n, head, vectors);
  SPW_CUDA(cudaGetLastError());
}

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

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/bf16x8.cuh"
#include "ops/rope.h"
#include "ops/rope_math.cuh"

namespace spillway::ops {

namespace {

constexpr int kThreads = 256;
// Pairs of 8 (or 1) elements each thread rotates, all loaded before any is
// stored so that they are in flight together.
constexpr int kItemsPerThread = 4;
// cos and sin depend on the token and the pair only: a block first computes
// them for its tokens into shared memory (at most this many of each), then
// rotates every head of those tokens with them.
constexpr int64_t kTableEntries = 4096;

__device__ inline void widen(const uint4& raw, float (&f)[8]) { widen8(raw, f); }
__device__ inline void widen(const __nv_bfloat16& raw, float (&f)[1]) {
  f[0] = __bfloat162float(raw);
}

__device__ inline void store_narrowed(__nv_bfloat16* p, const float (&f)[8]) {
  uint4 raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}
__device__ inline void store_narrowed(__nv_bfloat16* p, const float (&f)[1]) {
  *p = __float2bfloat16_rn(f[0]);
}

// Block b rotates tokens [b * tokens_per_block, ...) and visits the first
// visit_heads of each token's `heads`: heads from rotated_heads on are
// copied as they are, and in place they are not visited at all. Each thread
// reads all the elements of a step before writing any, and no two threads
// share an element, which is what lets out alias x.
template <int V>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t tokens, int64_t seq, int heads,
                int visit_heads, int head_dim, const float* __restrict__ inv_freq, int64_t pos0, float sign,
                int tokens_per_block, int rotated_heads, const int32_t* __restrict__ positions) {
  extern __shared__ float table[];  // cos [tokens_per_block][half], then sin
  const int half = head_dim / 2;
  const int64_t token0 = int64_t(blockIdx.x) * tokens_per_block;
  const int block_tokens = static_cast<int>(min(int64_t(tokens_per_block), tokens - token0));
  float* cos_t = table;
  float* sin_t = table + tokens_per_block * half;

  using Raw = std::conditional_t<V == 8, uint4, __nv_bfloat16>;
  const int chunks = half / V;
  const int per_token = visit_heads * chunks;
  const int items = block_tokens * per_token;
  Raw lo[kItemsPerThread], hi[kItemsPerThread];
  int64_t at[kItemsPerThread];
  int angle_at[kItemsPerThread];
  bool rotates[kItemsPerThread];
  auto load_step = [&](int base) {
#pragma unroll
    for (int u = 0; u < kItemsPerThread; ++u) {
      const int item = base + u * kThreads;
      if (item < items) {
        const int t = item / per_token;
        const int rem = item - t * per_token;
        const int h = rem / chunks;
        const int i0 = (rem - h * chunks) * V;
        at[u] = ((token0 + t) * heads + h) * head_dim + i0;
        angle_at[u] = t * half + i0;
        rotates[u] = h < rotated_heads;
        lo[u] = *reinterpret_cast<const Raw*>(x + at[u]);
        hi[u] = *reinterpret_cast<const Raw*>(x + at[u] + half);
      }
    }
  };
  auto rotate_step = [&](int base) {
#pragma unroll
    for (int u = 0; u < kItemsPerThread; ++u) {
      if (base + u * kThreads < items && !rotates[u]) {
        *reinterpret_cast<Raw*>(out + at[u]) = lo[u];
        *reinterpret_cast<Raw*>(out + at[u] + half) = hi[u];
      } else if (base + u * kThreads < items) {
        float l[V], h[V], new_lo[V], new_hi[V];
        widen(lo[u], l);
        widen(hi[u], h);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float c = cos_t[angle_at[u] + k];
          const float s = sin_t[angle_at[u] + k];
          rope_math::rotate(l[k], h[k], c, s, new_lo[k], new_hi[k]);
        }
        store_narrowed(out + at[u], new_lo);
        store_narrowed(out + at[u] + half, new_hi);
      }
    }
  };

  // The first step's loads are in flight while the angles are computed.
  load_step(threadIdx.x);
  for (int q = threadIdx.x; q < block_tokens * half; q += kThreads) {
    const int t = q / half;
    const int i = q - t * half;
    const int64_t token = token0 + t;
    const float angle = rope_math::angle(pos0 + (positions ? positions[token] : token % seq), inv_freq[i]);
    cos_t[q] = cosf(angle);
    sin_t[q] = sign * sinf(angle);
  }
  __syncthreads();
  rotate_step(threadIdx.x);
  for (int base = threadIdx.x + kItemsPerThread * kThreads; base < items;
       base += kItemsPerThread * kThreads) {
    load_step(base);
    rotate_step(base);
  }
}

template <int V>
void launch(const bf16* x, bf16* out, int64_t tokens, int64_t seq, int64_t heads, int64_t head_dim,
            const float* inv_freq, int64_t pos0, float sign, int64_t rotated_heads, const int32_t* positions,
            cudaStream_t stream) {
  if (tokens == 0 || heads == 0) return;
  const int64_t half = head_dim / 2;
  const int64_t visit_heads = x == out ? rotated_heads : heads;
  if (visit_heads == 0) return;
  const int64_t per_token = visit_heads * (half / V);
  int64_t tokens_per_block = std::max<int64_t>(1, kItemsPerThread * kThreads / per_token);
  tokens_per_block = std::min(tokens_per_block, std::max<int64_t>(1, kTableEntries / half));
  tokens_per_block = std::min(tokens_per_block, tokens);
  const int64_t blocks = (tokens + tokens_per_block - 1) / tokens_per_block;
  const size_t shared = 2 * static_cast<size_t>(tokens_per_block * half) * sizeof(float);
  rope_kernel<V><<<static_cast<unsigned>(blocks), kThreads, shared, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<__nv_bfloat16*>(out), tokens, seq,
      static_cast<int>(heads), static_cast<int>(visit_heads), static_cast<int>(head_dim), inv_freq, pos0, sign,
      static_cast<int>(tokens_per_block), static_cast<int>(rotated_heads), positions);
  SPW_CUDA(cudaGetLastError());
}

void rotate(const bf16* x, bf16* out, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
            const float* inv_freq, int64_t pos0, float sign, int64_t rotated_heads, const int32_t* positions,
            cudaStream_t stream) {
  SPW_CHECK(batch >= 0 && seq >= 0 && heads >= 0, "rope", "negative size: batch ", batch, ", seq ",
            seq, ", heads ", heads);
  SPW_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope", "head_dim must be positive and even, got ",
            head_dim);
  SPW_CHECK(head_dim <= 2 * kTableEntries && heads * head_dim < (int64_t(1) << 31), "rope",
            "the GPU kernel takes head_dim up to ", 2 * kTableEntries,
            " and heads * head_dim below 2^31, got head_dim ", head_dim, ", heads ", heads);
  SPW_CHECK(rotated_heads <= heads, "rope", "cannot rotate ", rotated_heads, " of ", heads, " heads");
  if (rotated_heads < 0) rotated_heads = heads;
  const int64_t tokens = batch * seq;
  const bool aligned =
      (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
  if ((head_dim / 2) % 8 == 0 && aligned) {
    launch<8>(x, out, tokens, seq, heads, head_dim, inv_freq, pos0, sign, rotated_heads, positions, stream);
  } else {
    launch<1>(x, out, tokens, seq, heads, head_dim, inv_freq, pos0, sign, rotated_heads, positions, stream);
  }
}

__global__ void rope_table_kernel(const float* __restrict__ inv_freq, int64_t seq, int half, int64_t pos0,
                                  float* cos_sin) {
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= seq * half) return;
  const float angle = rope_math::angle(pos0 + q / half, inv_freq[q % half]);
  cos_sin[q] = cosf(angle);
  cos_sin[seq * half + q] = sinf(angle);
}

}  // namespace

void rope_table_cuda(const float* inv_freq, int64_t seq, int64_t head_dim, int64_t pos0, float* cos_sin,
                     cudaStream_t stream) {
  SPW_CHECK(seq > 0 && head_dim > 0 && head_dim % 2 == 0, "rope_table", "needs seq > 0 and an even head_dim > 0, got seq ",
            seq, ", head_dim ", head_dim);
  const int64_t entries = seq * (head_dim / 2);
  rope_table_kernel<<<static_cast<unsigned>((entries + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      inv_freq, seq, static_cast<int>(head_dim / 2), pos0, cos_sin);
  SPW_CUDA(cudaGetLastError());
}

void rope_forward_cuda(const bf16* x, bf16* out, int64_t batch, int64_t seq, int64_t heads,
                       int64_t head_dim, const float* inv_freq, int64_t pos0, cudaStream_t stream,
                       int64_t rotated_heads, const int32_t* positions) {
  rotate(x, out, batch, seq, heads, head_dim, inv_freq, pos0, 1.0f, rotated_heads, positions, stream);
}

void rope_backward_cuda(const bf16* dout, bf16* dx, int64_t batch, int64_t seq, int64_t heads,
                        int64_t head_dim, const float* inv_freq, int64_t pos0,
                        cudaStream_t stream, int64_t rotated_heads, const int32_t* positions) {
  rotate(dout, dx, batch, seq, heads, head_dim, inv_freq, pos0, -1.0f, rotated_heads, positions, stream);
}

}  // namespace spillway::ops

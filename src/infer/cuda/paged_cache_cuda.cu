#include "infer/cuda/paged_cache_cuda.h"

#include <cuda_bf16.h>

#include <cmath>

#include "base/status.h"
#include "device/cuda/cuda_check.h"

namespace spillway::infer {

namespace {

constexpr int kWarps = 8;
constexpr int kKeyPiece = 32;
constexpr int kDimsPerLane = static_cast<int>(kPagedAttentionCudaMaxHeadDim / 32);

__device__ inline int64_t slot_of(const int32_t* table, int64_t t, int64_t block_tokens) {
  return static_cast<int64_t>(table[t / block_tokens]) * block_tokens + t % block_tokens;
}

__global__ void paged_kv_write_kernel(const __nv_bfloat16* k, const __nv_bfloat16* v, int64_t row_stride,
                                      PagedRowsCuda rows, __nv_bfloat16* k_pool, __nv_bfloat16* v_pool,
                                      int64_t kv_row, int64_t block_tokens) {
  const int64_t r = blockIdx.x;
  const int64_t slot = slot_of(rows.tables + rows.table_start[r], rows.position[r], block_tokens);
  for (int64_t i = threadIdx.x; i < kv_row; i += blockDim.x) {
    k_pool[slot * kv_row + i] = k[r * row_stride + i];
    v_pool[slot * kv_row + i] = v[r * row_stride + i];
  }
}

__device__ inline float warp_sum(float x) {
  // Lanes l and l ^ width add the same two numbers, so every lane ends with
  // the same bits: each keeps an identical online softmax.
#pragma unroll
  for (int width = 16; width > 0; width /= 2) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, width));
  return x;
}

__device__ inline float warp_max(float x) {
#pragma unroll
  for (int width = 16; width > 0; width /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, width));
  return x;
}

// q . k over head_dim numbers, in an order fixed by head_dim: four running
// sums (dimension d into sum d % 4), added pairwise at the end.
__device__ inline float key_dot(const float* q, const __nv_bfloat16* k, int64_t hd) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (hd % 8 == 0) {  // 16-byte rows: every key's row starts 16-byte aligned
    for (int64_t d0 = 0; d0 < hd; d0 += 8) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(k + d0));
      const auto* pair = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(pair[i]);
        s[(2 * i) % 4] = __fmaf_rn(q[d0 + 2 * i], f.x, s[(2 * i) % 4]);
        s[(2 * i + 1) % 4] = __fmaf_rn(q[d0 + 2 * i + 1], f.y, s[(2 * i + 1) % 4]);
      }
    }
  } else {
    for (int64_t d0 = 0; d0 < hd; d0 += 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (d0 + i < hd) s[i] = __fmaf_rn(q[d0 + i], __bfloat162float(k[d0 + i]), s[i]);
      }
    }
  }
  return __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
}

__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const __nv_bfloat16* q, int64_t q_stride, __nv_bfloat16* out, int64_t out_stride,
                           const __nv_bfloat16* k_pool, const __nv_bfloat16* v_pool, PagedRowsCuda rows,
                           PagedAttentionShape s, float scale) {
  const int64_t r = blockIdx.x, h = blockIdx.y;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hd = s.head_dim, kv_row = s.kv_heads * hd, g = h / (s.q_heads / s.kv_heads);
  const int64_t keys = static_cast<int64_t>(rows.position[r]) + 1;
  const int32_t* table = rows.tables + rows.table_start[r];

  __shared__ float q_shared[kPagedAttentionCudaMaxHeadDim];
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) q_shared[d] = __bfloat162float(q[r * q_stride + h * hd + d]);
  __syncthreads();

  float acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;
  float top = -INFINITY, total = 0.0f;
  // A piece's 32 keys are scored at once, lane j taking key p0 + j (the
  // keys' loads all in flight together); the values are then summed key by
  // key in position order, each lane holding its own dimensions.
  for (int64_t p0 = static_cast<int64_t>(warp) * kKeyPiece; p0 < keys; p0 += kWarps * kKeyPiece) {
    const int64_t t = p0 + lane;
    const bool key_ok = t < keys;
    const int64_t base = key_ok ? slot_of(table, t, s.block_tokens) * kv_row + g * hd : 0;
    const float score = key_ok ? key_dot(q_shared, k_pool + base, hd) * scale : -INFINITY;
    const float new_top = fmaxf(top, warp_max(score));  // finite: the piece holds a key
    const float rescale = expf(top - new_top);           // 0 before the first piece (top = -inf)
    const float weight = key_ok ? expf(score - new_top) : 0.0f;
    total = __fadd_rn(total * rescale, warp_sum(weight));
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[i] *= rescale;
    const int n = static_cast<int>(keys - p0 < kKeyPiece ? keys - p0 : kKeyPiece);
#pragma unroll 8
    for (int j = 0; j < n; ++j) {
      const float w = __shfl_sync(0xffffffffu, weight, j);
      const int64_t at = __shfl_sync(0xffffffffu, base, j);
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < hd) acc[i] = __fmaf_rn(w, __bfloat162float(v_pool[at + d]), acc[i]);
      }
    }
    top = new_top;
  }

  __shared__ float tops[kWarps], totals[kWarps];
  __shared__ float sums[kWarps][kPagedAttentionCudaMaxHeadDim];
  if (lane == 0) {
    tops[warp] = top;
    totals[warp] = total;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < hd) sums[warp][d] = acc[i];
  }
  __syncthreads();
  // Warp 0 holds key 0, so the largest top is finite; a warp that got no
  // keys (top = -inf) weighs nothing.
  float best = -INFINITY;
  for (int w = 0; w < kWarps; ++w) best = fmaxf(best, tops[w]);
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float denominator = 0.0f, numerator = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = tops[w] == -INFINITY ? 0.0f : expf(tops[w] - best);
      denominator += totals[w] * f;
      numerator += sums[w][d] * f;
    }
    out[r * out_stride + h * hd + d] = __float2bfloat16_rn(numerator / denominator);
  }
}

void check_shape(const PagedAttentionShape& s) {
  SPW_CHECK(s.head_dim > 0 && s.head_dim <= kPagedAttentionCudaMaxHeadDim, "paged attention (GPU)", "head_dim ",
            s.head_dim, " is outside 1..", kPagedAttentionCudaMaxHeadDim);
  SPW_CHECK(s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 && s.q_heads < 65536, "paged attention (GPU)",
            s.q_heads, " query heads do not share ", s.kv_heads, " key/value heads evenly");
  SPW_CHECK(s.block_tokens > 0, "paged attention (GPU)", "block_tokens must be positive, got ", s.block_tokens);
}

}  // namespace

void paged_kv_write_cuda(const bf16* k, const bf16* v, int64_t row_stride, const PagedRowsCuda& rows,
                         bf16* k_pool, bf16* v_pool, const PagedAttentionShape& shape, cudaStream_t stream) {
  check_shape(shape);
  if (rows.rows == 0) return;
  paged_kv_write_kernel<<<static_cast<unsigned>(rows.rows), 128, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(k), reinterpret_cast<const __nv_bfloat16*>(v), row_stride, rows,
      reinterpret_cast<__nv_bfloat16*>(k_pool), reinterpret_cast<__nv_bfloat16*>(v_pool),
      shape.kv_heads * shape.head_dim, shape.block_tokens);
  SPW_CUDA(cudaGetLastError());
}

void paged_attention_cuda(const bf16* q, int64_t q_stride, bf16* out, int64_t out_stride, const bf16* k_pool,
                          const bf16* v_pool, const PagedRowsCuda& rows, const PagedAttentionShape& shape,
                          float scale, cudaStream_t stream) {
  check_shape(shape);
  if (rows.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows.rows), static_cast<unsigned>(shape.q_heads));
  paged_attention_kernel<<<grid, kWarps * 32, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(q), q_stride, reinterpret_cast<__nv_bfloat16*>(out), out_stride,
      reinterpret_cast<const __nv_bfloat16*>(k_pool), reinterpret_cast<const __nv_bfloat16*>(v_pool), rows, shape,
      scale);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::infer

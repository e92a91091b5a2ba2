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

__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const __nv_bfloat16* q, int64_t q_stride, __nv_bfloat16* out, int64_t out_stride,
                           const __nv_bfloat16* k_pool, const __nv_bfloat16* v_pool, PagedRowsCuda rows,
                           PagedAttentionShape s, float scale) {
  const int64_t r = blockIdx.x, h = blockIdx.y;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hd = s.head_dim, kv_row = s.kv_heads * hd, g = h / (s.q_heads / s.kv_heads);
  const int64_t keys = static_cast<int64_t>(rows.position[r]) + 1;
  const int32_t* table = rows.tables + rows.table_start[r];

  float qf[kDimsPerLane], acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    qf[i] = d < hd ? __bfloat162float(q[r * q_stride + h * hd + d]) : 0.0f;
    acc[i] = 0.0f;
  }
  float top = -INFINITY, total = 0.0f;
  for (int64_t p0 = static_cast<int64_t>(warp) * kKeyPiece; p0 < keys; p0 += kWarps * kKeyPiece) {
    const int64_t end = p0 + kKeyPiece < keys ? p0 + kKeyPiece : keys;
    for (int64_t t = p0; t < end; ++t) {
      const int64_t base = slot_of(table, t, s.block_tokens) * kv_row + g * hd;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < hd) dot = __fmaf_rn(qf[i], __bfloat162float(k_pool[base + d]), dot);
      }
      const float score = warp_sum(dot) * scale;
      const float new_top = fmaxf(top, score);
      const float rescale = expf(top - new_top);  // 0 before the first key (top = -inf)
      const float weight = expf(score - new_top);
      total = total * rescale + weight;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int64_t d = lane + 32 * i;
        const float value = d < hd ? __bfloat162float(v_pool[base + d]) : 0.0f;
        acc[i] = acc[i] * rescale + weight * value;
      }
      top = new_top;
    }
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

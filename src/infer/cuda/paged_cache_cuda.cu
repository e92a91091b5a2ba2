#include "infer/cuda/paged_cache_cuda.h"

#include <cuda_bf16.h>

#include <cmath>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/dependent_launch.cuh"

namespace spillway::infer {

namespace {

constexpr int kWarps = 8;
constexpr int kKeyPiece = 32;
constexpr int kDimsPerLane = static_cast<int>(kPagedAttentionCudaMaxHeadDim / 32);
static_assert(kDimsPerLane == 4, "a lane's values are read as four bf16");

__device__ inline int64_t slot_of(const int32_t* table, int64_t t, int64_t block_tokens) {
  return static_cast<int64_t>(table[t / block_tokens]) * block_tokens + t % block_tokens;
}

__global__ void paged_kv_write_kernel(const __nv_bfloat16* k, const __nv_bfloat16* v, int64_t row_stride,
                                      PagedRowsCuda rows, __nv_bfloat16* k_pool, __nv_bfloat16* v_pool,
                                      int64_t kv_row, int64_t block_tokens) {
  dependents_may_start();  // launched dependent (device/cuda/dependent_launch.cuh)
  prior_grids_wait();
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

// A key's row where head_dim is a multiple of 8: every 16-byte piece of it
// loaded before any is used (one after the other, a lane waited on each in
// turn: 16 memory latencies a key at head_dim 128, most of a decode step's
// attention), and loaded once for all the heads of a group.
constexpr int kKeyRowPieces = static_cast<int>(kPagedAttentionCudaMaxHeadDim / 8);

__device__ inline void load_key(const __nv_bfloat16* k, int64_t hd, bool ok, uint4 (&key)[kKeyRowPieces]) {
#pragma unroll
  for (int p = 0; p < kKeyRowPieces; ++p) {
    key[p] = ok && 8 * p < hd ? __ldg(reinterpret_cast<const uint4*>(k + 8 * p)) : make_uint4(0, 0, 0, 0);
  }
}

// q . k over head_dim numbers, in an order fixed by head_dim: four running
// sums (dimension d into sum d % 4), added pairwise at the end. The key
// comes loaded (load_key) where head_dim is a multiple of 8, else from k.
__device__ inline float key_dot(const float* q, const uint4 (&key)[kKeyRowPieces], const __nv_bfloat16* k,
                                int64_t hd) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (hd % 8 == 0) {
#pragma unroll
    for (int p = 0; p < kKeyRowPieces; ++p) {
      if (8 * p >= hd) break;
      const auto* pair = reinterpret_cast<const __nv_bfloat162*>(&key[p]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(pair[i]);
        s[(2 * i) % 4] = __fmaf_rn(q[8 * p + 2 * i], f.x, s[(2 * i) % 4]);
        s[(2 * i + 1) % 4] = __fmaf_rn(q[8 * p + 2 * i + 1], f.y, s[(2 * i + 1) % 4]);
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

// The online softmax of query heads h0 .. h0 + Heads - 1 of row r (heads
// of one key/value head) over keys [k_begin, k_end), by the block's 8 warps
// as paged_cache_cuda.h says, each head's numbers made as if it ran alone:
// the heads only share the keys' and values' loads. `emit(head, d, best,
// denominator, numerator)` then takes each dimension's merged sums.
template <int Heads, typename Emit>
__device__ inline void attend(const __nv_bfloat16* q, int64_t q_stride, const __nv_bfloat16* k_pool,
                              const __nv_bfloat16* v_pool, const PagedRowsCuda& rows, const PagedAttentionShape& s,
                              float scale, int64_t r, int64_t h0, int64_t k_begin, int64_t k_end, Emit emit) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hd = s.head_dim, kv_row = s.kv_heads * hd, g = h0 / (s.q_heads / s.kv_heads);
  const int32_t* table = rows.tables + rows.table_start[r];

  __shared__ float q_shared[Heads][kPagedAttentionCudaMaxHeadDim];
  for (int64_t e = threadIdx.x; e < Heads * hd; e += blockDim.x) {
    q_shared[e / hd][e % hd] = __bfloat162float(q[r * q_stride + h0 * hd + e]);
  }
  __syncthreads();

  float acc[Heads][kDimsPerLane], top[Heads], total[Heads];
#pragma unroll
  for (int x = 0; x < Heads; ++x) {
    top[x] = -INFINITY;
    total[x] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[x][i] = 0.0f;
  }
  // A piece's 32 keys are scored at once, lane j taking key p0 + j (the
  // keys' loads all in flight together); the values are then summed key by
  // key in position order, each lane holding its own kDimsPerLane
  // consecutive dimensions (read in one 8-byte load where head_dim allows).
  const int64_t d0 = static_cast<int64_t>(lane) * kDimsPerLane;
  const bool vector_values = hd % kDimsPerLane == 0;
  for (int64_t p0 = k_begin + static_cast<int64_t>(warp) * kKeyPiece; p0 < k_end; p0 += kWarps * kKeyPiece) {
    const int64_t t = p0 + lane;
    const bool key_ok = t < k_end;
    const int64_t base = key_ok ? slot_of(table, t, s.block_tokens) * kv_row + g * hd : 0;
    uint4 key[kKeyRowPieces];
    load_key(k_pool + base, hd, key_ok && hd % 8 == 0, key);
    float weight[Heads];
#pragma unroll
    for (int x = 0; x < Heads; ++x) {
      const float score = key_ok ? key_dot(q_shared[x], key, k_pool + base, hd) * scale : -INFINITY;
      const float new_top = fmaxf(top[x], warp_max(score));  // finite: the piece holds a key
      const float rescale = expf(top[x] - new_top);           // 0 before the first piece (top = -inf)
      weight[x] = key_ok ? expf(score - new_top) : 0.0f;
      total[x] = __fadd_rn(total[x] * rescale, warp_sum(weight[x]));
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) acc[x][i] *= rescale;
      top[x] = new_top;
    }
    const int n = static_cast<int>(k_end - p0 < kKeyPiece ? k_end - p0 : kKeyPiece);
    if (vector_values) {
#pragma unroll 8
      for (int j = 0; j < n; ++j) {
        const int64_t at = __shfl_sync(0xffffffffu, base, j);
        float v[kDimsPerLane] = {};
        if (d0 < hd) {
          const uint2 raw = __ldg(reinterpret_cast<const uint2*>(v_pool + at + d0));
          const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
          const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
          v[0] = lo.x;
          v[1] = lo.y;
          v[2] = hi.x;
          v[3] = hi.y;
        }
#pragma unroll
        for (int x = 0; x < Heads; ++x) {
          const float w = __shfl_sync(0xffffffffu, weight[x], j);
#pragma unroll
          for (int i = 0; i < kDimsPerLane; ++i) acc[x][i] = __fmaf_rn(w, v[i], acc[x][i]);
        }
      }
    } else {
#pragma unroll 8
      for (int j = 0; j < n; ++j) {
        const int64_t at = __shfl_sync(0xffffffffu, base, j);
#pragma unroll
        for (int x = 0; x < Heads; ++x) {
          const float w = __shfl_sync(0xffffffffu, weight[x], j);
#pragma unroll
          for (int i = 0; i < kDimsPerLane; ++i) {
            if (d0 + i < hd) acc[x][i] = __fmaf_rn(w, __bfloat162float(v_pool[at + d0 + i]), acc[x][i]);
          }
        }
      }
    }
  }

  __shared__ float tops[kWarps][Heads], totals[kWarps][Heads];
  __shared__ float sums[kWarps][Heads][kPagedAttentionCudaMaxHeadDim];
#pragma unroll
  for (int x = 0; x < Heads; ++x) {
    if (lane == 0) {
      tops[warp][x] = top[x];
      totals[warp][x] = total[x];
    }
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      if (d0 + i < hd) sums[warp][x][d0 + i] = acc[x][i];
    }
  }
  __syncthreads();
  // Warp 0 holds the range's first key, so the largest top is finite; a
  // warp that got no keys (top = -inf) weighs nothing.
  for (int64_t e = threadIdx.x; e < Heads * hd; e += blockDim.x) {
    const int x = static_cast<int>(e / hd);
    const int64_t d = e % hd;
    float best = -INFINITY;
    for (int w = 0; w < kWarps; ++w) best = fmaxf(best, tops[w][x]);
    float denominator = 0.0f, numerator = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = tops[w][x] == -INFINITY ? 0.0f : expf(tops[w][x] - best);
      denominator = __fmaf_rn(totals[w][x], f, denominator);
      numerator = __fmaf_rn(sums[w][x][d], f, numerator);
    }
    emit(x, d, best, denominator, numerator);
  }
}

__device__ inline int64_t row_keys(const PagedRowsCuda& rows, int64_t r) {
  return static_cast<int64_t>(rows.position[r]) + 1;
}

// Rows of one split: one block per (row, group of Heads query heads), the
// result written. Heads 1 for few rows (more blocks), the whole group of a
// key/value head for many (a prompt's rows: its keys and values read once
// for the group instead of once a head).
template <int Heads>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const __nv_bfloat16* q, int64_t q_stride, __nv_bfloat16* out, int64_t out_stride,
                           const __nv_bfloat16* k_pool, const __nv_bfloat16* v_pool, PagedRowsCuda rows,
                           PagedAttentionShape s, float scale) {
  dependents_may_start();  // launched dependent (device/cuda/dependent_launch.cuh)
  prior_grids_wait();
  const int64_t r = blockIdx.x, h0 = blockIdx.y * static_cast<int64_t>(Heads), keys = row_keys(rows, r);
  if (paged_attention_splits(keys) > 1) return;
  __nv_bfloat16* o = out + r * out_stride + h0 * s.head_dim;
  const int64_t hd = s.head_dim;
  attend<Heads>(q, q_stride, k_pool, v_pool, rows, s, scale, r, h0, 0, keys,
                [o, hd](int x, int64_t d, float, float denominator, float numerator) {
                  o[x * hd + d] = __float2bfloat16_rn(numerator / denominator);
                });
}

// Rows of several splits: one block per (row, query head, split), its
// sums written to partials[row][head][split] as (best, denominator,
// numerator[head_dim]). A split's keys are whole pieces but the last's.
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_split_kernel(const __nv_bfloat16* q, int64_t q_stride, const __nv_bfloat16* k_pool,
                                 const __nv_bfloat16* v_pool, PagedRowsCuda rows, PagedAttentionShape s, float scale,
                                 float* partials) {
  dependents_may_start();  // launched dependent (device/cuda/dependent_launch.cuh)
  prior_grids_wait();
  const int64_t r = blockIdx.x, h = blockIdx.y, z = blockIdx.z, keys = row_keys(rows, r);
  const int64_t splits = paged_attention_splits(keys);
  if (splits == 1 || z >= splits) return;
  const int64_t per = ((keys + splits - 1) / splits + kKeyPiece - 1) / kKeyPiece * kKeyPiece;
  const int64_t k_begin = z * per, k_end = k_begin + per < keys ? k_begin + per : keys;
  float* partial = partials + ((r * s.q_heads + h) * kPagedAttentionCudaMaxSplits + z) * (s.head_dim + 2);
  attend<1>(q, q_stride, k_pool, v_pool, rows, s, scale, r, h, k_begin, k_end,
            [partial](int, int64_t d, float best, float denominator, float numerator) {
           if (d == 0) {
             partial[0] = best;
             partial[1] = denominator;
           }
           partial[2 + d] = numerator;
         });
}

// A split row's sums merged in split order.
__global__ void merge_splits_kernel(__nv_bfloat16* out, int64_t out_stride, PagedRowsCuda rows, PagedAttentionShape s,
                                    const float* partials) {
  dependents_may_start();  // launched dependent (device/cuda/dependent_launch.cuh)
  prior_grids_wait();
  const int64_t r = blockIdx.x, h = blockIdx.y, hd = s.head_dim;
  const int64_t splits = paged_attention_splits(row_keys(rows, r));
  if (splits == 1) return;
  const float* partial = partials + (r * s.q_heads + h) * kPagedAttentionCudaMaxSplits * (hd + 2);
  float best = -INFINITY;
  for (int64_t z = 0; z < splits; ++z) best = fmaxf(best, partial[z * (hd + 2)]);
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float denominator = 0.0f, numerator = 0.0f;
    for (int64_t z = 0; z < splits; ++z) {
      const float* p = partial + z * (hd + 2);
      const float f = p[0] == -INFINITY ? 0.0f : expf(p[0] - best);
      denominator += p[1] * f;
      numerator += p[2 + d] * f;
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
  launch_dependent(paged_kv_write_kernel, dim3(static_cast<unsigned>(rows.rows)), dim3(128), 0, stream,
                   reinterpret_cast<const __nv_bfloat16*>(k), reinterpret_cast<const __nv_bfloat16*>(v), row_stride,
                   rows, reinterpret_cast<__nv_bfloat16*>(k_pool), reinterpret_cast<__nv_bfloat16*>(v_pool),
                   shape.kv_heads * shape.head_dim, shape.block_tokens);
  SPW_CUDA(cudaGetLastError());
}

void paged_attention_cuda(const bf16* q, int64_t q_stride, bf16* out, int64_t out_stride, const bf16* k_pool,
                          const bf16* v_pool, const PagedRowsCuda& rows, const PagedAttentionShape& shape,
                          float scale, int64_t most_keys, float* workspace, cudaStream_t stream) {
  check_shape(shape);
  const bool split = paged_attention_splits(most_keys) > 1;
  SPW_CHECK(!split || workspace != nullptr, "paged attention (GPU)", "rows of ", most_keys,
            " keys need the workspace of split sums");
  if (rows.rows == 0) return;
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  const auto* qb = reinterpret_cast<const __nv_bfloat16*>(q);
  const auto* kb = reinterpret_cast<const __nv_bfloat16*>(k_pool);
  const auto* vb = reinterpret_cast<const __nv_bfloat16*>(v_pool);
  const dim3 grid(static_cast<unsigned>(rows.rows), static_cast<unsigned>(shape.q_heads));
  const int64_t group = shape.q_heads / shape.kv_heads;
  const dim3 grouped(grid.x, static_cast<unsigned>(shape.kv_heads));
  if (rows.rows > kPagedAttentionCudaGroupFrom && group == 4) {
    launch_dependent(paged_attention_kernel<4>, grouped, dim3(kWarps * 32), 0, stream, qb, q_stride, o, out_stride, kb,
                     vb, rows, shape, scale);
  } else if (rows.rows > kPagedAttentionCudaGroupFrom && group == 8) {
    launch_dependent(paged_attention_kernel<8>, grouped, dim3(kWarps * 32), 0, stream, qb, q_stride, o, out_stride, kb,
                     vb, rows, shape, scale);
  } else {
    launch_dependent(paged_attention_kernel<1>, grid, dim3(kWarps * 32), 0, stream, qb, q_stride, o, out_stride, kb, vb,
                     rows, shape, scale);
  }
  SPW_CUDA(cudaGetLastError());
  if (!split) return;
  launch_dependent(paged_attention_split_kernel, dim3(grid.x, grid.y, static_cast<unsigned>(kPagedAttentionCudaMaxSplits)),
                   dim3(kWarps * 32), 0, stream, qb, q_stride, kb, vb, rows, shape, scale, workspace);
  SPW_CUDA(cudaGetLastError());
  launch_dependent(merge_splits_kernel, grid, dim3(128), 0, stream, o, out_stride, rows, shape,
                   static_cast<const float*>(workspace));
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::infer

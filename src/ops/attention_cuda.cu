// Own flash attention kernels (forward, backward) for causal GQA, bf16 in and
// out, fp32 math on tensor cores through mma.sync m16n8k16.
//
// Every kernel works on square 64 x 64 tiles of (queries x keys), like the
// CPU version: the tile of the diagonal is the only one the causal mask cuts.
// A block of 4 warps owns one 64-row tile; warp w owns its rows 16w..16w+15,
// and in every mma fragment lane (g = lane / 4, t = lane % 4) holds rows g and
// g + 8 and columns 2t, 2t + 1 (+ 8 for the second half of an A fragment).
// Because the fp32 accumulator layout of two adjacent 16 x 8 results equals
// the A layout of one 16 x 16 operand, probabilities go from the score
// accumulators into the next product without passing through shared memory.
//
// Backward runs in two passes with no atomics, as on the CPU: one block per
// key tile of a kv head sums dk and dv over every query row (of every query
// head of the group) that sees it; one block per query tile sums dq.
//
// With document starts (packed rows, ops/attention.h) a query also hides
// the keys before its document's start, and whole tiles that lie before
// (or, in pass 1, after) every row's document are skipped; without them
// (null) each kernel does what it did before, bit for bit.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/attention.h"

namespace spillway::ops {

namespace {

using bf16_t = __nv_bfloat16;

constexpr int kTile = 64;
constexpr int kWarps = kTile / 16;
constexpr int kThreads = kWarps * 32;
// Each shared-memory row is padded by 8 bf16 (16 bytes, keeping rows 16-byte
// aligned). Row strides then fall 4 words apart modulo the 32 banks, so the
// 8 rows x 4 words of one fragment load hit 32 different banks.
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Sizes and the distance (in elements) between consecutive positions of the
// [batch, seq, heads * head_dim] tensors.
struct Dims {
  int seq;
  int q_heads;
  int group;  // query heads per kv head
  int head_dim;
  int64_t q_row;
  int64_t kv_row;
};

template <int D>
struct Tiles {
  static constexpr int kRowStride = D + kPad;      // tile of rows: [kTile][D + kPad]
  static constexpr int kColStride = kTile + kPad;  // transposed tile: [D][kTile + kPad]
  static constexpr int kRowElems = kTile * kRowStride;
  static constexpr int kColElems = D * kColStride;
};

__device__ __forceinline__ uint32_t load_pair(const bf16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// c += a * b for one 16 x 8 x 16 product (a row-major, b column-major).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "attention_cuda.cu needs sm_80 or newer (bf16 mma.sync)"
#endif
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A fragment: rows r0..r0+15, columns k0..k0+15 of a row-major tile.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16_t* tile, int stride, int r0,
                                       int k0, int g, int t) {
  const bf16_t* p = tile + (r0 + g) * stride + k0 + 2 * t;
  a[0] = load_pair(p);
  a[1] = load_pair(p + 8 * stride);
  a[2] = load_pair(p + 8);
  a[3] = load_pair(p + 8 * stride + 8);
}

// B fragment (16 x 8, k x n) whose element (k, n) is tile[n0 + n][k0 + k]:
// the tile holds the operand's columns as its rows.
__device__ __forceinline__ void load_b(uint32_t& b0, uint32_t& b1, const bf16_t* tile, int stride,
                                       int n0, int k0, int g, int t) {
  const bf16_t* p = tile + (n0 + g) * stride + k0 + 2 * t;
  b0 = load_pair(p);
  b1 = load_pair(p + 8);
}

// The A fragment of columns 16c..16c+15 of a 16 x 64 accumulator tile.
__device__ __forceinline__ void accumulators_as_a(uint32_t (&a)[4], const float (&acc)[8][4],
                                                  int c) {
  a[0] = pack_bf16(acc[2 * c][0], acc[2 * c][1]);
  a[1] = pack_bf16(acc[2 * c][2], acc[2 * c][3]);
  a[2] = pack_bf16(acc[2 * c + 1][0], acc[2 * c + 1][1]);
  a[3] = pack_bf16(acc[2 * c + 1][2], acc[2 * c + 1][3]);
}

// acc (16 x 64) = rows r0.. of `a_tile` times the rows of `b_tile` transposed,
// both row-major [64][D + kPad]: scores q k^T, or dout v^T.
template <int D>
__device__ __forceinline__ void tile_scores(float (&acc)[8][4], const bf16_t* a_tile,
                                            const bf16_t* b_tile, int r0, int g, int t) {
#pragma unroll
  for (int n = 0; n < 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    uint32_t a[4];
    load_a(a, a_tile, Tiles<D>::kRowStride, r0, k0, g, t);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      uint32_t b0, b1;
      load_b(b0, b1, b_tile, Tiles<D>::kRowStride, n * 8, k0, g, t);
      mma_bf16(acc[n], a, b0, b1);
    }
  }
}

// acc (16 x D) += probs (16 x 64, in accumulator layout) times the 64 x D
// operand whose transpose `cols` holds ([D][kTile + kPad]).
template <int D>
__device__ __forceinline__ void accumulate_product(float (&acc)[D / 8][4], const float (&probs)[8][4],
                                                   const bf16_t* cols, int g, int t) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    uint32_t a[4];
    accumulators_as_a(a, probs, c);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      uint32_t b0, b1;
      load_b(b0, b1, cols, Tiles<D>::kColStride, n * 8, c * 16, g, t);
      mma_bf16(acc[n], a, b0, b1);
    }
  }
}

// Copies positions row0..row0+63 of one head (`src` points at position 0 of
// that head) into shared memory, as rows ([64][D + kPad]) and/or as columns
// ([D][64 + kPad]). Positions past seq and columns past head_dim become zero,
// so they add nothing to any product. `vectors`: 16-byte loads are safe
// (head_dim % 8 == 0 and every base pointer 16-byte aligned).
template <int D>
__device__ void load_tile(const bf16_t* src, int64_t row_elems, int row0, const Dims& dims,
                          bool vectors, bf16_t* rows, bf16_t* cols) {
  // Thread c moves 8 columns of one row. The 32 lanes of a warp take 16 rows
  // x 2 chunks: each row's 32 bytes are one memory sector, and the transposed
  // stores of a warp meet in at most 2 words per bank.
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
    const int group = c / 32;
    const int r = (group % (kTile / 16)) * 16 + c % 16;
    const int d0 = ((group / (kTile / 16)) * 2 + (c / 16) % 2) * 8;
    const int pos = row0 + r;
    alignas(16) bf16_t chunk[8];
    if (pos < dims.seq && vectors && d0 < dims.head_dim) {
      *reinterpret_cast<uint4*>(chunk) =
          *reinterpret_cast<const uint4*>(src + pos * row_elems + d0);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        chunk[e] = (pos < dims.seq && d0 + e < dims.head_dim) ? src[pos * row_elems + d0 + e]
                                                             : __float2bfloat16(0.0f);
      }
    }
    if (rows != nullptr) {
      *reinterpret_cast<uint4*>(rows + r * Tiles<D>::kRowStride + d0) =
          *reinterpret_cast<const uint4*>(chunk);
    }
    if (cols != nullptr) {
#pragma unroll
      for (int e = 0; e < 8; ++e) cols[(d0 + e) * Tiles<D>::kColStride + r] = chunk[e];
    }
  }
}

// Writes a 16 x D accumulator tile, each row times its factor, to rows
// row_lo and row_lo + 8 of one head, skipping positions past seq and columns
// past head_dim.
template <int D>
__device__ void store_rows(bf16_t* dst, int64_t row_elems, int row_lo, const Dims& dims,
                           const float (&acc)[D / 8][4], const float (&factor)[2], int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int pos = row_lo + 8 * half;
    if (pos >= dims.seq) continue;
    bf16_t* row = dst + pos * row_elems;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int d = n * 8 + 2 * t + e;
        if (d < dims.head_dim) row[d] = __float2bfloat16(acc[n][2 * half + e] * factor[half]);
      }
    }
  }
}

// The first key that query `pos` of a row may see: its document's start
// (0 without documents, and for the padding rows past seq).
__device__ __forceinline__ int first_key(const int32_t* starts, int pos, int seq) {
  return starts && pos < seq ? starts[pos] : 0;
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k,
                   const bf16_t* __restrict__ v, bf16_t* __restrict__ out,
                   float* __restrict__ lse, Dims dims, float scale_log2, bool vectors,
                   const int32_t* __restrict__ doc_starts) {
  extern __shared__ __align__(16) unsigned char shared[];
  bf16_t* q_rows = reinterpret_cast<bf16_t*>(shared);
  bf16_t* k_rows = q_rows + Tiles<D>::kRowElems;
  bf16_t* v_cols = k_rows + Tiles<D>::kRowElems;

  // Later query tiles see more keys, so they start first.
  const int qb = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int i0 = qb * kTile;
  const int row_lo = i0 + warp * 16 + g;

  const int64_t batch_q = static_cast<int64_t>(b) * dims.seq * dims.q_row;
  const int64_t batch_kv = static_cast<int64_t>(b) * dims.seq * dims.kv_row;
  const int64_t kv_head = static_cast<int64_t>(h / dims.group) * dims.head_dim;
  const bf16_t* k_head = k + batch_kv + kv_head;
  const bf16_t* v_head = v + batch_kv + kv_head;
  load_tile<D>(q + batch_q + static_cast<int64_t>(h) * dims.head_dim, dims.q_row, i0, dims,
               vectors, q_rows, nullptr);

  // Running max (in log2 units of the scaled scores) and this lane's partial
  // sum of each of its two rows; the four lanes of a row add theirs at the end.
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  const int32_t* starts = doc_starts ? doc_starts + static_cast<int64_t>(b) * dims.seq : nullptr;
  const int row_start[2] = {first_key(starts, row_lo, dims.seq), first_key(starts, row_lo + 8, dims.seq)};

  // Starts never decrease, so the tile's first row has the earliest document.
  for (int kb = starts ? starts[i0] / kTile : 0; kb <= qb; ++kb) {
    __syncthreads();  // every warp is done with the previous k and v tiles
    load_tile<D>(k_head, dims.kv_row, kb * kTile, dims, vectors, k_rows, nullptr);
    load_tile<D>(v_head, dims.kv_row, kb * kTile, dims, vectors, nullptr, v_cols);
    __syncthreads();

    float s[8][4];
    tile_scores<D>(s, q_rows, k_rows, warp * 16, g, t);

    float new_max[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row_lo + 8 * (e / 2);
        const int col = kb * kTile + n * 8 + 2 * t + (e % 2);
        const bool seen = col <= row && col < dims.seq && col >= row_start[e / 2];
        const float x = seen ? s[n][e] * scale_log2 : -INFINITY;
        s[n][e] = x;
        new_max[e / 2] = fmaxf(new_max[e / 2], x);
      }
    }
    // Without documents key 0 is visible to every row, so after the first
    // tile each max is finite. With them a row may have seen no key yet: its
    // max stays -inf, and it shifts by 0 instead (every exponent is -inf).
    float shrink[2], shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 1));
      new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 2));
      shrink[r] = new_max[r] == -INFINITY ? 1.0f : exp2f(row_max[r] - new_max[r]);
      row_max[r] = new_max[r];
      shift[r] = new_max[r] == -INFINITY ? 0.0f : new_max[r];
      row_sum[r] *= shrink[r];
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - shift[e / 2]);
        row_sum[e / 2] += s[n][e];
      }
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[n][e] *= shrink[e / 2];
    }
    accumulate_product<D>(acc, s, v_cols, g, t);
  }

  float inverse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    inverse[r] = 1.0f / row_sum[r];
  }
  store_rows<D>(out + batch_q + static_cast<int64_t>(h) * dims.head_dim, dims.q_row, row_lo, dims,
                acc, inverse, t);
  if (t == 0) {
    float* lse_head = lse + (static_cast<int64_t>(b) * dims.q_heads + h) * dims.seq;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int pos = row_lo + 8 * r;
      if (pos < dims.seq) lse_head[pos] = (row_max[r] + log2f(row_sum[r])) * kLn2;
    }
  }
}

// D[b, h, t] = dout[b, t, h] . out[b, t, h] in fp32, one warp per row, summed
// lane-strided and then by a fixed butterfly.
__global__ void row_dot_kernel(const bf16_t* __restrict__ dout, const bf16_t* __restrict__ out,
                               float* __restrict__ row_dot, Dims dims, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       row < rows; row += warps) {
    // row enumerates (b, t, h) in memory order; the result goes to (b, h, t).
    const int h = static_cast<int>(row % dims.q_heads);
    const int64_t bt = row / dims.q_heads;
    const int pos = static_cast<int>(bt % dims.seq);
    const int64_t b = bt / dims.seq;
    const bf16_t* a = dout + row * dims.head_dim;
    const bf16_t* o = out + row * dims.head_dim;
    float sum = 0.0f;
    for (int d = lane; d < dims.head_dim; d += 32) {
      sum += __bfloat162float(a[d]) * __bfloat162float(o[d]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    if (lane == 0) row_dot[(b * dims.q_heads + h) * dims.seq + pos] = sum;
  }
}

// Pass 1: one block per key tile of one kv head; dk and dv of those keys,
// summed over every later query tile of every query head of the group. The
// score tiles are built transposed (keys down, queries across), so P^T and
// dS^T come out of the accumulators ready to be the A operand.
template <int D>
__global__ void __launch_bounds__(kThreads)
    backward_kv_kernel(const bf16_t* __restrict__ dout, const bf16_t* __restrict__ q,
                       const bf16_t* __restrict__ k, const bf16_t* __restrict__ v,
                       const float* __restrict__ lse, const float* __restrict__ row_dot,
                       bf16_t* __restrict__ dk, bf16_t* __restrict__ dv, Dims dims, float scale,
                       float scale_log2, bool vectors, const int32_t* __restrict__ doc_starts) {
  extern __shared__ __align__(16) unsigned char shared[];
  bf16_t* k_rows = reinterpret_cast<bf16_t*>(shared);
  bf16_t* v_rows = k_rows + Tiles<D>::kRowElems;
  bf16_t* q_rows = v_rows + Tiles<D>::kRowElems;
  bf16_t* dout_rows = q_rows + Tiles<D>::kRowElems;
  bf16_t* q_cols = dout_rows + Tiles<D>::kRowElems;
  bf16_t* dout_cols = q_cols + Tiles<D>::kColElems;
  float* lse_tile = reinterpret_cast<float*>(dout_cols + Tiles<D>::kColElems);  // log2 units
  float* dot_tile = lse_tile + kTile;
  int* start_tile = reinterpret_cast<int*>(dot_tile + kTile);  // each query's document start

  const int kb = blockIdx.x;  // earlier key tiles have more work and start first
  const int kv = blockIdx.y;
  const int b = blockIdx.z;
  const int blocks = gridDim.x;
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int key_lo = kb * kTile + warp * 16 + g;

  const int64_t batch_q = static_cast<int64_t>(b) * dims.seq * dims.q_row;
  const int64_t batch_kv = static_cast<int64_t>(b) * dims.seq * dims.kv_row;
  const int64_t kv_head = static_cast<int64_t>(kv) * dims.head_dim;
  load_tile<D>(k + batch_kv + kv_head, dims.kv_row, kb * kTile, dims, vectors, k_rows, nullptr);
  load_tile<D>(v + batch_kv + kv_head, dims.kv_row, kb * kTile, dims, vectors, v_rows, nullptr);

  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;
  }

  const int32_t* starts = doc_starts ? doc_starts + static_cast<int64_t>(b) * dims.seq : nullptr;
  for (int h = kv * dims.group; h < (kv + 1) * dims.group; ++h) {
    const int64_t q_head = batch_q + static_cast<int64_t>(h) * dims.head_dim;
    const int64_t stat_head = (static_cast<int64_t>(b) * dims.q_heads + h) * dims.seq;
    for (int qb = kb; qb < blocks; ++qb) {
      const int i0 = qb * kTile;
      // Starts never decrease: once a query tile begins past this key tile's
      // last key, it and every later one see none of it.
      if (starts && starts[i0] >= (kb + 1) * kTile) break;
      __syncthreads();  // every warp is done with the previous query tiles
      load_tile<D>(q + q_head, dims.q_row, i0, dims, vectors, q_rows, q_cols);
      load_tile<D>(dout + q_head, dims.q_row, i0, dims, vectors, dout_rows, dout_cols);
      if (threadIdx.x < kTile) {
        const int pos = i0 + threadIdx.x;
        lse_tile[threadIdx.x] = pos < dims.seq ? lse[stat_head + pos] * kLog2e : 0.0f;
        dot_tile[threadIdx.x] = pos < dims.seq ? row_dot[stat_head + pos] : 0.0f;
        start_tile[threadIdx.x] = first_key(starts, pos, dims.seq);
      }
      __syncthreads();

      float p[8][4], ds[8][4];
      tile_scores<D>(p, k_rows, q_rows, warp * 16, g, t);
      tile_scores<D>(ds, v_rows, dout_rows, warp * 16, g, t);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key_lo + 8 * (e / 2);
          const int col = n * 8 + 2 * t + (e % 2);
          const int pos = i0 + col;
          const float prob = (pos >= key && pos < dims.seq && key >= start_tile[col])
                                 ? exp2f(p[n][e] * scale_log2 - lse_tile[col])
                                 : 0.0f;
          p[n][e] = prob;
          ds[n][e] = prob * (ds[n][e] - dot_tile[col]);
        }
      }
      accumulate_product<D>(dv_acc, p, dout_cols, g, t);
      accumulate_product<D>(dk_acc, ds, q_cols, g, t);
    }
  }

  const float dk_factor[2] = {scale, scale};
  const float dv_factor[2] = {1.0f, 1.0f};
  store_rows<D>(dk + batch_kv + kv_head, dims.kv_row, key_lo, dims, dk_acc, dk_factor, t);
  store_rows<D>(dv + batch_kv + kv_head, dims.kv_row, key_lo, dims, dv_acc, dv_factor, t);
}

// Pass 2: one block per query tile of one query head; dq of those rows,
// summed over the key tiles up to the diagonal.
template <int D>
__global__ void __launch_bounds__(kThreads)
    backward_q_kernel(const bf16_t* __restrict__ dout, const bf16_t* __restrict__ q,
                      const bf16_t* __restrict__ k, const bf16_t* __restrict__ v,
                      const float* __restrict__ lse, const float* __restrict__ row_dot,
                      bf16_t* __restrict__ dq, Dims dims, float scale, float scale_log2,
                      bool vectors, const int32_t* __restrict__ doc_starts) {
  extern __shared__ __align__(16) unsigned char shared[];
  bf16_t* q_rows = reinterpret_cast<bf16_t*>(shared);
  bf16_t* dout_rows = q_rows + Tiles<D>::kRowElems;
  bf16_t* k_rows = dout_rows + Tiles<D>::kRowElems;
  bf16_t* v_rows = k_rows + Tiles<D>::kRowElems;
  bf16_t* k_cols = v_rows + Tiles<D>::kRowElems;

  const int qb = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int i0 = qb * kTile;
  const int row_lo = i0 + warp * 16 + g;

  const int64_t q_head = static_cast<int64_t>(b) * dims.seq * dims.q_row +
                         static_cast<int64_t>(h) * dims.head_dim;
  const int64_t kv_head = static_cast<int64_t>(b) * dims.seq * dims.kv_row +
                          static_cast<int64_t>(h / dims.group) * dims.head_dim;
  const int64_t stat_head = (static_cast<int64_t>(b) * dims.q_heads + h) * dims.seq;
  load_tile<D>(q + q_head, dims.q_row, i0, dims, vectors, q_rows, nullptr);
  load_tile<D>(dout + q_head, dims.q_row, i0, dims, vectors, dout_rows, nullptr);

  float row_lse[2], row_term[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int pos = row_lo + 8 * r;
    row_lse[r] = pos < dims.seq ? lse[stat_head + pos] * kLog2e : 0.0f;
    row_term[r] = pos < dims.seq ? row_dot[stat_head + pos] : 0.0f;
  }
  float dq_acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) dq_acc[n][0] = dq_acc[n][1] = dq_acc[n][2] = dq_acc[n][3] = 0.0f;
  const int32_t* starts = doc_starts ? doc_starts + static_cast<int64_t>(b) * dims.seq : nullptr;
  const int row_start[2] = {first_key(starts, row_lo, dims.seq), first_key(starts, row_lo + 8, dims.seq)};

  for (int kb = starts ? starts[i0] / kTile : 0; kb <= qb; ++kb) {
    __syncthreads();
    load_tile<D>(k + kv_head, dims.kv_row, kb * kTile, dims, vectors, k_rows, k_cols);
    load_tile<D>(v + kv_head, dims.kv_row, kb * kTile, dims, vectors, v_rows, nullptr);
    __syncthreads();

    float p[8][4], ds[8][4];
    tile_scores<D>(p, q_rows, k_rows, warp * 16, g, t);
    tile_scores<D>(ds, dout_rows, v_rows, warp * 16, g, t);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int row = row_lo + 8 * r;
        const int col = kb * kTile + n * 8 + 2 * t + (e % 2);
        const float prob = (col <= row && row < dims.seq && col >= row_start[r])
                               ? exp2f(p[n][e] * scale_log2 - row_lse[r])
                               : 0.0f;
        ds[n][e] = prob * (ds[n][e] - row_term[r]);
      }
    }
    accumulate_product<D>(dq_acc, ds, k_cols, g, t);
  }

  const float factor[2] = {scale, scale};
  store_rows<D>(dq + q_head, dims.q_row, row_lo, dims, dq_acc, factor, t);
}

void check_shape(const AttentionShape& s, const char* thing) {
  SPW_CHECK(!s.packed_qkv, thing, "the own kernel takes q, k and v as separate tensors, not packed");
  SPW_CHECK(s.batch >= 0 && s.seq >= 0, thing, "negative size: batch ", s.batch, ", seq ", s.seq);
  SPW_CHECK(s.q_heads > 0 && s.kv_heads > 0 && s.head_dim > 0, thing,
            "q_heads, kv_heads and head_dim must be positive, got ", s.q_heads, ", ", s.kv_heads,
            ", ", s.head_dim);
  SPW_CHECK(s.q_heads % s.kv_heads == 0, thing, "q_heads ", s.q_heads,
            " is not a multiple of kv_heads ", s.kv_heads);
  SPW_CHECK(s.head_dim <= kAttentionCudaMaxHeadDim, thing, "head_dim ", s.head_dim,
            " is above the kernel's limit of ", kAttentionCudaMaxHeadDim);
  SPW_CHECK(s.seq < (int64_t{1} << 30) && s.q_heads < 65536 && s.batch < 65536, thing,
            "sizes too large for the launch grid: batch ", s.batch, ", seq ", s.seq,
            ", q_heads ", s.q_heads);
}

Dims make_dims(const AttentionShape& s) {
  return Dims{static_cast<int>(s.seq),      static_cast<int>(s.q_heads),
              static_cast<int>(s.q_heads / s.kv_heads), static_cast<int>(s.head_dim),
              s.q_heads * s.head_dim,        s.kv_heads * s.head_dim};
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename... Pointers>
bool vectors_safe(const AttentionShape& s, const Pointers*... pointers) {
  return s.head_dim % 8 == 0 && (aligned16(pointers) && ...);
}

int tile_count(int64_t seq) { return static_cast<int>((seq + kTile - 1) / kTile); }

// Kernels that take more than the default 48 KiB of dynamic shared memory
// must say so before their launch.
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  SPW_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(bytes)));
}

template <int D>
void launch_forward(const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* out, float* lse,
                    const AttentionShape& s, float scale_log2, bool vectors, const int32_t* docs,
                    cudaStream_t stream) {
  const size_t shared = (2 * Tiles<D>::kRowElems + Tiles<D>::kColElems) * sizeof(bf16_t);
  allow_shared(forward_kernel<D>, shared);
  const dim3 grid(tile_count(s.seq), static_cast<unsigned>(s.q_heads),
                  static_cast<unsigned>(s.batch));
  forward_kernel<D><<<grid, kThreads, shared, stream>>>(q, k, v, out, lse, make_dims(s),
                                                        scale_log2, vectors, docs);
  SPW_CUDA(cudaGetLastError());
}

template <int D>
void launch_backward(const bf16_t* dout, const bf16_t* q, const bf16_t* k, const bf16_t* v,
                     const float* lse, const float* row_dot, bf16_t* dq, bf16_t* dk, bf16_t* dv,
                     const AttentionShape& s, float scale, float scale_log2, bool vectors,
                     const int32_t* docs, cudaStream_t stream) {
  const Dims dims = make_dims(s);
  const size_t kv_shared = (4 * Tiles<D>::kRowElems + 2 * Tiles<D>::kColElems) * sizeof(bf16_t) +
                           2 * kTile * sizeof(float) + kTile * sizeof(int);
  allow_shared(backward_kv_kernel<D>, kv_shared);
  const dim3 kv_grid(tile_count(s.seq), static_cast<unsigned>(s.kv_heads),
                     static_cast<unsigned>(s.batch));
  backward_kv_kernel<D><<<kv_grid, kThreads, kv_shared, stream>>>(
      dout, q, k, v, lse, row_dot, dk, dv, dims, scale, scale_log2, vectors, docs);
  SPW_CUDA(cudaGetLastError());

  const size_t q_shared = (4 * Tiles<D>::kRowElems + Tiles<D>::kColElems) * sizeof(bf16_t);
  allow_shared(backward_q_kernel<D>, q_shared);
  const dim3 q_grid(tile_count(s.seq), static_cast<unsigned>(s.q_heads),
                    static_cast<unsigned>(s.batch));
  backward_q_kernel<D><<<q_grid, kThreads, q_shared, stream>>>(dout, q, k, v, lse, row_dot, dq,
                                                               dims, scale, scale_log2, vectors, docs);
  SPW_CUDA(cudaGetLastError());
}

// The kernels are compiled for padded head widths 32, 64 and 128; a smaller
// head_dim runs in the next one up with zero columns.
int padded_head_dim(int64_t head_dim) { return head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : 128; }

}  // namespace

void attention_forward_cuda(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                            const AttentionShape& shape, double scale, cudaStream_t stream,
                            const int32_t* doc_starts) {
  check_shape(shape, "attention_forward_cuda");
  if (shape.batch == 0 || shape.seq == 0) return;
  const auto* q_ = reinterpret_cast<const bf16_t*>(q);
  const auto* k_ = reinterpret_cast<const bf16_t*>(k);
  const auto* v_ = reinterpret_cast<const bf16_t*>(v);
  auto* out_ = reinterpret_cast<bf16_t*>(out);
  const float scale_log2 = static_cast<float>(scale) * kLog2e;
  const bool vectors = vectors_safe(shape, q, k, v);
  switch (padded_head_dim(shape.head_dim)) {
    case 32:
      launch_forward<32>(q_, k_, v_, out_, lse, shape, scale_log2, vectors, doc_starts, stream);
      break;
    case 64:
      launch_forward<64>(q_, k_, v_, out_, lse, shape, scale_log2, vectors, doc_starts, stream);
      break;
    default:
      launch_forward<128>(q_, k_, v_, out_, lse, shape, scale_log2, vectors, doc_starts, stream);
      break;
  }
}

uint64_t attention_backward_cuda_workspace_bytes(const AttentionShape& shape) {
  return static_cast<uint64_t>(shape.batch * shape.q_heads * shape.seq) * sizeof(float);
}

void attention_backward_cuda(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                             const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                             const AttentionShape& shape, double scale, void* workspace,
                             cudaStream_t stream, const int32_t* doc_starts) {
  check_shape(shape, "attention_backward_cuda");
  if (shape.batch == 0 || shape.seq == 0) return;
  SPW_CHECK(workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % alignof(float) == 0,
            "attention_backward_cuda", "workspace must be a 4-byte aligned device buffer of ",
            attention_backward_cuda_workspace_bytes(shape), " bytes");
  const auto* dout_ = reinterpret_cast<const bf16_t*>(dout);
  const auto* q_ = reinterpret_cast<const bf16_t*>(q);
  const auto* k_ = reinterpret_cast<const bf16_t*>(k);
  const auto* v_ = reinterpret_cast<const bf16_t*>(v);
  auto* dq_ = reinterpret_cast<bf16_t*>(dq);
  auto* dk_ = reinterpret_cast<bf16_t*>(dk);
  auto* dv_ = reinterpret_cast<bf16_t*>(dv);
  auto* row_dot = static_cast<float*>(workspace);

  const Dims dims = make_dims(shape);
  const int64_t rows = shape.batch * shape.seq * shape.q_heads;
  constexpr int kDotThreads = 256;
  const int64_t dot_blocks = std::min<int64_t>((rows + kDotThreads / 32 - 1) / (kDotThreads / 32),
                                               int64_t{1} << 16);
  row_dot_kernel<<<static_cast<unsigned>(dot_blocks), kDotThreads, 0, stream>>>(
      dout_, reinterpret_cast<const bf16_t*>(out), row_dot, dims, rows);
  SPW_CUDA(cudaGetLastError());

  const float scale_f = static_cast<float>(scale);
  const float scale_log2 = scale_f * kLog2e;
  const bool vectors = vectors_safe(shape, dout, q, k, v);
  switch (padded_head_dim(shape.head_dim)) {
    case 32:
      launch_backward<32>(dout_, q_, k_, v_, lse, row_dot, dq_, dk_, dv_, shape, scale_f,
                          scale_log2, vectors, doc_starts, stream);
      break;
    case 64:
      launch_backward<64>(dout_, q_, k_, v_, lse, row_dot, dq_, dk_, dv_, shape, scale_f,
                          scale_log2, vectors, doc_starts, stream);
      break;
    default:
      launch_backward<128>(dout_, q_, k_, v_, lse, row_dot, dq_, dk_, dv_, shape, scale_f,
                           scale_log2, vectors, doc_starts, stream);
      break;
  }
}

}  // namespace spillway::ops

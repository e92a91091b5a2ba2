// Attention of new queries against a bf16 key/value cache on the GPU, for
// prefill and decoding (see attention_cached.h for the contract).
//
// Rows are (query, query head) pairs; the rows that share a kv head are
// numbered r = query * group + head_in_group. A block takes kRows of them and
// one range of keys, loads the queries once (scaled, in fp32), then walks the
// keys kKeys at a time: K and V tiles go to shared memory in fp32, each thread
// scores its row against a strided share of the tile's keys, the row's
// threads agree on the running max and sum through warp shuffles, and each
// thread accumulates a strided share of the row's output dimensions. Scores
// are kept in base 2 (log2(e) folded into the scale) so the softmax uses exp2.
//
// Decoding gives few rows (one query times the group), so blocks take 8 rows
// and split the keys into ranges; merge_kernel combines the ranges' partial
// (max, sum, unnormalised output) in a fixed order.
//
// Workspace layout for a split into S ranges of R = batch * q_len * q_heads
// rows: first the stats, S * R float2 (max, sum), then the outputs, S * R *
// head_dim floats; range s, row r sits at index s * R + r of each. The stats
// are written as one float2 and read through float2: nvcc 13.0 (V13.0.88,
// -O3, sm_90a) miscompiled the merge's earlier scalar pair part_stats[2 * at]
// (max) and part_stats[2 * at + 1] (sum): in the output loop over ranges,
// unrolled 4x, iterations 2-4 loaded the sum where the max belonged (the PTX
// lost the -4 byte offset), so those ranges were weighted 2^(sum - max) and
// outputs came out 1e7-1e14 too large wherever there were 4 or more ranges.
// Check the merge's PTX when changing how it reads the stats.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/attention_cached.h"

namespace spillway::ops {

namespace {

constexpr int kThreads = 128;
constexpr int kKeys = 64;  // keys per shared-memory tile
// Split the keys only into ranges of at least this many, and only until the
// grid has this many blocks per SM.
constexpr int64_t kMinKeysPerSplit = 2 * kKeys;
constexpr int64_t kBlocksPerSm = 2;
constexpr float kLog2e = 1.4426950408889634f;

struct Params {
  int64_t q_len, kv_len, cache_len;
  int q_heads, kv_heads, head_dim, group;
  int64_t rows_per_kv_head;  // q_len * group
  int64_t keys_per_split;    // a multiple of kKeys
  int64_t rows_total;        // batch * q_len * q_heads: the partial results' row count
  float scale_log2;          // scale * log2(e)
};

template <int kMaxDim, int kRows>
struct Tile {
  static constexpr int kThreadsPerRow = kThreads / kRows;
  static constexpr int kScoresPerThread = kKeys / kThreadsPerRow;
  static constexpr int kDimsPerThread = kMaxDim / kThreadsPerRow;
  static constexpr int kStride = kMaxDim + 1;  // padded rows: a column read hits distinct banks
  static constexpr int kProbStride = kKeys + 1;
  static constexpr size_t kSharedBytes =
      sizeof(float) * (size_t(kRows) * kStride + 2 * size_t(kKeys) * kStride + size_t(kRows) * kProbStride);
  static_assert(kThreads % kRows == 0 && kThreadsPerRow <= 32 && 32 % kThreadsPerRow == 0);
  static_assert(kKeys % kThreadsPerRow == 0 && kMaxDim % kThreadsPerRow == 0);
};

// grid: x = row tile, y = batch * kv_heads + kv head, z = key range.
template <int kMaxDim, int kRows>
__global__ void __launch_bounds__(kThreads)
    cached_attention_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
                            const __nv_bfloat16* __restrict__ v_cache, __nv_bfloat16* __restrict__ out,
                            float* __restrict__ part_out, float2* __restrict__ part_stats, Params p) {
  using T = Tile<kMaxDim, kRows>;
  constexpr int kTpr = T::kThreadsPerRow;
  extern __shared__ float shared[];
  float* qs = shared;                         // [kRows][kStride]
  float* ks = qs + kRows * T::kStride;        // [kKeys][kStride]
  float* vs = ks + kKeys * T::kStride;        // [kKeys][kStride]
  float* ps = vs + kKeys * T::kStride;        // [kRows][kProbStride]

  const int tid = threadIdx.x;
  const int r = tid / kTpr, lane_in_row = tid % kTpr;
  const int d = p.head_dim;
  const int g = static_cast<int>(blockIdx.y % p.kv_heads);
  const int64_t b = blockIdx.y / p.kv_heads;
  const int64_t row0 = int64_t(blockIdx.x) * kRows;
  const int64_t q_row = int64_t(p.q_heads) * d, kv_row = int64_t(p.kv_heads) * d;
  const int64_t first_pos = p.kv_len - p.q_len;

  // This thread's row and the position of its query.
  const int64_t row = row0 + r;
  const bool row_valid = row < p.rows_per_kv_head;
  const int64_t qi = row_valid ? row / p.group : 0;
  const int h = g * p.group + static_cast<int>(row_valid ? row % p.group : 0);
  const int64_t pos = row_valid ? first_pos + qi : -1;

  for (int e = tid; e < kRows * d; e += kThreads) {
    const int rr = e / d, j = e - rr * d;
    const int64_t row_e = row0 + rr;
    float value = 0.0f;
    if (row_e < p.rows_per_kv_head) {
      const int64_t i = row_e / p.group;
      const int64_t he = int64_t(g) * p.group + row_e % p.group;
      value = __bfloat162float(q[(b * p.q_len + i) * q_row + he * d + j]) * p.scale_log2;
    }
    qs[rr * T::kStride + j] = value;
  }

  // Keys of this block: its range, cut at the tile's last query (causal).
  const int64_t last_row = min(row0 + kRows, p.rows_per_kv_head) - 1;
  const int64_t tile_last_pos = first_pos + last_row / p.group;
  const int64_t key_begin = int64_t(blockIdx.z) * p.keys_per_split;
  const int64_t key_end = min(min(key_begin + p.keys_per_split, p.kv_len), tile_last_pos + 1);

  const __nv_bfloat16* kb = k_cache + b * p.cache_len * kv_row + int64_t(g) * d;
  const __nv_bfloat16* vb = v_cache + b * p.cache_len * kv_row + int64_t(g) * d;
  // Output dimensions of this thread: lane_in_row + kTpr * j for j < my_dims.
  const int my_dims = d > lane_in_row ? (d - lane_in_row + kTpr - 1) / kTpr : 0;

  float m = -INFINITY, l = 0.0f;
  float acc[T::kDimsPerThread];
#pragma unroll
  for (int j = 0; j < T::kDimsPerThread; ++j) acc[j] = 0.0f;

  for (int64_t key0 = key_begin; key0 < key_end; key0 += kKeys) {
    const int nk = static_cast<int>(min(int64_t(kKeys), key_end - key0));
    __syncthreads();  // the previous tile is consumed (and the queries are in)
    // Keys past the range are zeros, so the cache's unwritten rows (anything,
    // NaN included) never reach a product.
    for (int e = tid; e < kKeys * d; e += kThreads) {
      const int kk = e / d, j = e - kk * d;
      float kv = 0.0f, vv = 0.0f;
      if (kk < nk) {
        kv = __bfloat162float(kb[(key0 + kk) * kv_row + j]);
        vv = __bfloat162float(vb[(key0 + kk) * kv_row + j]);
      }
      ks[kk * T::kStride + j] = kv;
      vs[kk * T::kStride + j] = vv;
    }
    __syncthreads();

    float s[T::kScoresPerThread];
#pragma unroll
    for (int c = 0; c < T::kScoresPerThread; ++c) s[c] = 0.0f;
    for (int j = 0; j < d; ++j) {
      const float qv = qs[r * T::kStride + j];
#pragma unroll
      for (int c = 0; c < T::kScoresPerThread; ++c) s[c] += qv * ks[(lane_in_row + c * kTpr) * T::kStride + j];
    }
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < T::kScoresPerThread; ++c) {
      const int kk = lane_in_row + c * kTpr;
      if (kk >= nk || key0 + kk > pos) s[c] = -INFINITY;
      tile_max = fmaxf(tile_max, s[c]);
    }
#pragma unroll
    for (int offset = kTpr / 2; offset > 0; offset /= 2) {
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
    }
    const float m_new = fmaxf(m, tile_max);
    // A row that has seen no key yet keeps m = -inf and l = 0.
    const float correction = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < T::kScoresPerThread; ++c) {
      const float prob = s[c] == -INFINITY ? 0.0f : exp2f(s[c] - m_new);
      ps[r * T::kProbStride + lane_in_row + c * kTpr] = prob;
      sum += prob;
    }
#pragma unroll
    for (int offset = kTpr / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    l = l * correction + sum;
    m = m_new;
#pragma unroll
    for (int j = 0; j < T::kDimsPerThread; ++j) acc[j] *= correction;
    __syncwarp();  // a row's threads share one warp: its probabilities are visible

#pragma unroll 4
    for (int c = 0; c < kKeys; ++c) {
      const float prob = ps[r * T::kProbStride + c];
      const float* v_row = vs + c * T::kStride + lane_in_row;
#pragma unroll
      for (int j = 0; j < T::kDimsPerThread; ++j) {
        if (j < my_dims) acc[j] += prob * v_row[j * kTpr];
      }
    }
  }

  if (!row_valid) return;
  const int64_t out_row = (b * p.q_len + qi) * p.q_heads + h;
  if (gridDim.z == 1) {
    const float inv = 1.0f / l;
#pragma unroll
    for (int j = 0; j < T::kDimsPerThread; ++j) {
      if (j < my_dims) out[out_row * d + lane_in_row + j * kTpr] = __float2bfloat16_rn(acc[j] * inv);
    }
  } else {
    const int64_t at = int64_t(blockIdx.z) * p.rows_total + out_row;
#pragma unroll
    for (int j = 0; j < T::kDimsPerThread; ++j) {
      if (j < my_dims) part_out[at * d + lane_in_row + j * kTpr] = acc[j];
    }
    if (lane_in_row == 0) part_stats[at] = make_float2(m, l);
  }
}

// One block per row: out = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s,
// the key ranges taken in order. A range that saw no key (m = -inf, l = 0,
// o = 0) gets weight 0 and adds nothing; every row has a range that saw key 0,
// so M is finite. No range is skipped by a test on l: a partial the first
// kernel failed to write (NaN in a poisoned workspace) shows in the output.
__global__ void __launch_bounds__(kThreads)
    merge_kernel(const float* __restrict__ part_out, const float2* __restrict__ part_stats,
                 __nv_bfloat16* __restrict__ out, int splits, int64_t rows_total, int d) {
  const int64_t row = blockIdx.x;
  float big = -INFINITY;
  for (int s = 0; s < splits; ++s) big = fmaxf(big, part_stats[s * rows_total + row].x);
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float2 st = part_stats[s * rows_total + row];
    total += st.y * exp2f(st.x - big);
  }
  const float inv = 1.0f / total;
  for (int j = threadIdx.x; j < d; j += kThreads) {
    float o = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const int64_t at = s * rows_total + row;
      o += part_out[at * d + j] * exp2f(part_stats[at].x - big);
    }
    out[row * d + j] = __float2bfloat16_rn(o * inv);
  }
}

int sm_count() {
  int device = 0, sms = 0;
  SPW_CUDA(cudaGetDevice(&device));
  SPW_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

template <int kMaxDim, int kRows>
void launch(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* out,
            const Params& p, int64_t batch, int64_t splits, void* workspace, cudaStream_t stream) {
  using T = Tile<kMaxDim, kRows>;
  auto kernel = cached_attention_kernel<kMaxDim, kRows>;
  SPW_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(T::kSharedBytes)));
  // Stats first: at the workspace's start they are float2-aligned whatever
  // head_dim is.
  float2* part_stats = splits > 1 ? static_cast<float2*>(workspace) : nullptr;
  float* part_out = splits > 1 ? reinterpret_cast<float*>(part_stats + splits * p.rows_total) : nullptr;
  const dim3 grid(static_cast<unsigned>((p.rows_per_kv_head + kRows - 1) / kRows),
                  static_cast<unsigned>(batch * p.kv_heads), static_cast<unsigned>(splits));
  kernel<<<grid, kThreads, T::kSharedBytes, stream>>>(q, k, v, out, part_out, part_stats, p);
  SPW_CUDA(cudaGetLastError());
  if (splits > 1) {
    merge_kernel<<<static_cast<unsigned>(p.rows_total), kThreads, 0, stream>>>(
        part_out, part_stats, out, static_cast<int>(splits), p.rows_total, p.head_dim);
    SPW_CUDA(cudaGetLastError());
  }
}

template <int kRows>
void launch_rows(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* out,
                 const Params& p, int64_t batch, int64_t splits, void* workspace, cudaStream_t stream) {
  if (p.head_dim <= 64) {
    launch<64, kRows>(q, k, v, out, p, batch, splits, workspace, stream);
  } else {
    launch<128, kRows>(q, k, v, out, p, batch, splits, workspace, stream);
  }
}

}  // namespace

void attention_cached_cuda(const bf16* q, const bf16* k_cache, const bf16* v_cache, bf16* out,
                           const CachedAttentionShape& s, double scale, void* workspace,
                           uint64_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kThing = "attention_cached_cuda";
  SPW_CHECK(s.batch >= 0 && s.q_len >= 0 && s.q_len <= s.kv_len && s.kv_len <= s.cache_len, kThing, "q_len ",
            s.q_len, ", kv_len ", s.kv_len, " and cache_len ", s.cache_len, " must be ordered");
  SPW_CHECK(s.kv_heads > 0 && s.q_heads % s.kv_heads == 0, kThing, s.q_heads,
            " query heads are not a multiple of ", s.kv_heads, " kv heads");
  SPW_CHECK(s.head_dim >= 1 && s.head_dim <= kAttentionCachedCudaMaxHeadDim, kThing, "head_dim ", s.head_dim,
            " is outside [1, ", kAttentionCachedCudaMaxHeadDim, "]");
  SPW_CHECK(workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % alignof(float2) == 0, kThing,
            "the workspace must be ", alignof(float2), "-byte aligned");
  if (s.batch == 0 || s.q_len == 0 || s.q_heads == 0) return;
  SPW_CHECK(s.batch * s.kv_heads <= 65535, kThing, "batch * kv_heads = ", s.batch * s.kv_heads,
            " is more than a grid's 65535");

  Params p{};
  p.q_len = s.q_len;
  p.kv_len = s.kv_len;
  p.cache_len = s.cache_len;
  p.q_heads = static_cast<int>(s.q_heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.head_dim = static_cast<int>(s.head_dim);
  p.group = static_cast<int>(s.q_heads / s.kv_heads);
  p.rows_per_kv_head = s.q_len * p.group;
  p.rows_total = s.batch * s.q_len * s.q_heads;
  p.scale_log2 = static_cast<float>(scale) * kLog2e;

  // Decoding (a few rows per kv head) takes small tiles; prefill large ones.
  const int rows = p.rows_per_kv_head <= 8 ? 8 : 32;
  const int64_t blocks = (p.rows_per_kv_head + rows - 1) / rows * s.batch * s.kv_heads;
  // Split the keys while the grid is short of kBlocksPerSm blocks per SM, the
  // ranges stay long enough to pay for the merge, and the partials fit.
  const int64_t target = kBlocksPerSm * sm_count();
  int64_t splits = blocks < target ? (target + blocks - 1) / blocks : 1;
  splits = std::min(splits, (s.kv_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  const uint64_t bytes_per_split =
      static_cast<uint64_t>(p.rows_total) * (sizeof(float2) + static_cast<uint64_t>(s.head_dim) * sizeof(float));
  splits = std::min<int64_t>(splits, static_cast<int64_t>(workspace_bytes / bytes_per_split));
  if (workspace == nullptr) splits = 1;
  splits = std::max<int64_t>(splits, 1);
  // Whole tiles per range, and no empty range at the end.
  p.keys_per_split = ((s.kv_len + splits - 1) / splits + kKeys - 1) / kKeys * kKeys;
  splits = (s.kv_len + p.keys_per_split - 1) / p.keys_per_split;

  const auto* qq = reinterpret_cast<const __nv_bfloat16*>(q);
  const auto* kk = reinterpret_cast<const __nv_bfloat16*>(k_cache);
  const auto* vv = reinterpret_cast<const __nv_bfloat16*>(v_cache);
  auto* oo = reinterpret_cast<__nv_bfloat16*>(out);
  if (rows == 8) {
    launch_rows<8>(qq, kk, vv, oo, p, s.batch, splits, workspace, stream);
  } else {
    launch_rows<32>(qq, kk, vv, oo, p, s.batch, splits, workspace, stream);
  }
}

}  // namespace spillway::ops

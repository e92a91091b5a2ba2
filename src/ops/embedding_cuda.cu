#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/embedding.h"

namespace spillway::ops {

namespace {

constexpr int kThreads = 256;
// Sort keys a block orders in shared memory, with kTile / 2 threads.
constexpr int64_t kTile = 2048;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned blocks_for(int64_t threads) {
  return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

// The sort runs over a power of two of keys, padded with keys that sort last.
int64_t sort_length(int64_t tokens) {
  int64_t n = 1;
  while (n < tokens) n <<= 1;
  return n;
}

// Workspace layout: keys [sort_length], then run_end [vocab].
struct Workspace {
  uint64_t* keys;
  int32_t* run_end;
};

Workspace carve(void* workspace, int64_t tokens) {
  auto* keys = static_cast<uint64_t*>(workspace);
  return {keys, reinterpret_cast<int32_t*>(keys + sort_length(tokens))};
}

__device__ inline bool id_in_range(int64_t id, int64_t vocab) { return id >= 0 && id < vocab; }

// out[t, chunk] = table[ids[t], chunk], or zeros for an id out of range.
template <int V>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(const int32_t* __restrict__ ids, const __nv_bfloat16* __restrict__ table,
                       __nv_bfloat16* __restrict__ out, int64_t tokens, int64_t vocab,
                       int64_t dim, int64_t first_row) {
  const int64_t chunks = dim / V;
  const int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= tokens * chunks) return;
  const int64_t t = idx / chunks;
  const int64_t j = (idx - t * chunks) * V;
  const int64_t id = ids[t] - first_row;
  if constexpr (V == 8) {
    uint4 row = make_uint4(0, 0, 0, 0);
    if (id_in_range(id, vocab)) row = *reinterpret_cast<const uint4*>(table + id * dim + j);
    *reinterpret_cast<uint4*>(out + t * dim + j) = row;
  } else {
    out[t * dim + j] = id_in_range(id, vocab) ? table[id * dim + j] : __float2bfloat16_rn(0.0f);
  }
}

// first_bad was set to all ones (-1, the largest unsigned); the smallest bad
// position wins whatever order the threads run in.
__global__ void __launch_bounds__(kThreads)
    check_ids_kernel(const int32_t* __restrict__ ids, int64_t tokens, int64_t vocab,
                     unsigned* first_bad) {
  const int64_t t = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (t < tokens && !id_in_range(ids[t], vocab)) atomicMin(first_bad, static_cast<unsigned>(t));
}

// key = id << 32 | position, unique per token, so sorting the keys orders the
// positions by id and, within an id, by position. An id out of range sorts as
// `vocab`, after every real row, and padding sorts last of all.
__global__ void __launch_bounds__(kThreads)
    make_keys_kernel(const int32_t* __restrict__ ids, uint64_t* __restrict__ keys, int64_t tokens,
                     int64_t n, int64_t vocab, int64_t first_row) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  uint64_t key = ~0ull;
  if (i < tokens) {
    const int64_t id = ids[i] - first_row;
    const uint64_t row = id_in_range(id, vocab) ? uint64_t(id) : uint64_t(vocab);
    key = (row << 32) | uint64_t(i);
  }
  keys[i] = key;
}

// The first index of pair p at step j (a power of two): p's bits above j
// move up one place, leaving room for the partner's bit j.
__device__ inline int64_t pair_first(int64_t p, int64_t j) {
  return ((p & ~(j - 1)) << 1) | (p & (j - 1));
}

__device__ inline void order_pair(uint64_t& a, uint64_t& b, bool ascending) {
  if ((a > b) == ascending) {
    const uint64_t t = a;
    a = b;
    b = t;
  }
}

// The bitonic network: stage k merges runs of k keys, each run ascending or
// descending by bit k of the global index; step j compares keys j apart.
// This block runs stages k_first..k_last (doubling) over its tile in shared
// memory, each from step min(k, tile) / 2 down to 1. Larger steps run in
// bitonic_step_kernel.
__global__ void __launch_bounds__(kTile / 2)
    bitonic_tile_kernel(uint64_t* __restrict__ keys, int64_t tile, int64_t k_first,
                        int64_t k_last) {
  __shared__ uint64_t s[kTile];
  const int64_t base = int64_t(blockIdx.x) * tile;
  const int64_t half = tile / 2;
  const int64_t p = threadIdx.x;
  s[p] = keys[base + p];
  s[p + half] = keys[base + p + half];
  __syncthreads();
  for (int64_t k = k_first; k <= k_last; k <<= 1) {
    for (int64_t j = min(k, tile) / 2; j > 0; j >>= 1) {
      const int64_t i = pair_first(p, j);
      order_pair(s[i], s[i + j], ((base + i) & k) == 0);
      __syncthreads();
    }
  }
  keys[base + p] = s[p];
  keys[base + p + half] = s[p + half];
}

__global__ void __launch_bounds__(kThreads)
    bitonic_step_kernel(uint64_t* __restrict__ keys, int64_t n, int64_t k, int64_t j) {
  const int64_t p = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (p >= n / 2) return;
  const int64_t i = pair_first(p, j);
  uint64_t a = keys[i], b = keys[i + j];
  order_pair(a, b, (i & k) == 0);
  keys[i] = a;
  keys[i + j] = b;
}

// The run of row id's tokens in the sorted keys ends at run_end[id]. Only
// ids that have tokens get an entry, and only those are read.
__global__ void __launch_bounds__(kThreads)
    run_ends_kernel(const uint64_t* __restrict__ keys, int32_t* __restrict__ run_end,
                    int64_t tokens, int64_t vocab) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= tokens) return;
  const uint64_t id = keys[i] >> 32;
  if (id >= uint64_t(vocab)) return;
  if (i == tokens - 1 || (keys[i + 1] >> 32) != id) run_end[id] = static_cast<int32_t>(i + 1);
}

// For each run of sorted keys (one table row's tokens): dtable[id, chunk] =
// sum of dout[t, chunk] over the run, in position order, in fp32 (Accumulate:
// dtable[id, chunk] += that sum). Threads of a sorted position that does not
// start a run have nothing to do; rows with no run keep what they hold (the
// zeros they were cleared to, unless accumulating). With a base, base[id,
// chunk] is added to the sum before the sum goes into the row: the order
// add_cuda's out (+)= a + b rounds in.
template <int V, bool Accumulate, bool HasBase>
__global__ void __launch_bounds__(kThreads)
    sum_runs_kernel(const uint64_t* __restrict__ keys, const int32_t* __restrict__ run_end,
                    const __nv_bfloat16* __restrict__ dout, const float* __restrict__ base,
                    float* __restrict__ dtable, int64_t tokens, int64_t vocab, int64_t dim) {
  const int64_t chunks = dim / V;
  const int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= tokens * chunks) return;
  const int64_t i = idx / chunks;
  const int64_t j = (idx - i * chunks) * V;
  const uint64_t id = keys[i] >> 32;
  if (id >= uint64_t(vocab) || (i > 0 && (keys[i - 1] >> 32) == id)) return;
  float sum[V] = {};
  const int32_t end = run_end[id];
  // Unrolled so the loads of several tokens are in flight at once; the adds
  // still run in position order.
#pragma unroll 8
  for (int32_t k = static_cast<int32_t>(i); k < end; ++k) {
    const int64_t t = static_cast<int64_t>(keys[k] & 0xffffffffu);
    if constexpr (V == 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(dout + t * dim + j);
      const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(h[q]);
        sum[2 * q] += f.x;
        sum[2 * q + 1] += f.y;
      }
    } else {
      sum[0] += __bfloat162float(dout[t * dim + j]);
    }
  }
  float* row = dtable + static_cast<int64_t>(id) * dim + j;
  if constexpr (HasBase && V == 8) {
    const float* b = base + static_cast<int64_t>(id) * dim + j;
    const float4 lo = *reinterpret_cast<const float4*>(b);
    const float4 hi = *reinterpret_cast<const float4*>(b + 4);
    const float addend[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int q = 0; q < 8; ++q) sum[q] = __fadd_rn(addend[q], sum[q]);
  } else if constexpr (HasBase) {
    sum[0] = __fadd_rn(base[static_cast<int64_t>(id) * dim + j], sum[0]);
  }
  if constexpr (Accumulate && V == 8) {
    const float4 lo = *reinterpret_cast<const float4*>(row);
    const float4 hi = *reinterpret_cast<const float4*>(row + 4);
    const float old[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int q = 0; q < 8; ++q) sum[q] = old[q] + sum[q];
  } else if constexpr (Accumulate) {
    sum[0] = row[0] + sum[0];
  }
  if constexpr (V == 8) {
    *reinterpret_cast<float4*>(row) = make_float4(sum[0], sum[1], sum[2], sum[3]);
    *reinterpret_cast<float4*>(row + 4) = make_float4(sum[4], sum[5], sum[6], sum[7]);
  } else {
    row[0] = sum[0];
  }
}

// The rows no token uses (run_end 0, cleared before the runs were found) of
// a backward with a base: dtable = base + 0, or dtable += base + 0 with
// Accumulate, which is what the unfused add does to a row the backward
// cleared. The + 0 is not a no-op: it turns a base of -0 into +0, as the
// add would. Rows with a run are left to sum_runs_kernel, so every row is
// written once and the table is never cleared.
template <int V, bool Accumulate>
__global__ void __launch_bounds__(kThreads)
    base_rows_kernel(const int32_t* __restrict__ run_end, const float* __restrict__ base,
                     float* __restrict__ dtable, int64_t vocab, int64_t dim) {
  const int64_t chunks = dim / V;
  const int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= vocab * chunks) return;
  const int64_t v = idx / chunks;
  if (run_end[v] != 0) return;
  const int64_t at = v * dim + (idx - v * chunks) * V;
  if constexpr (V == 4) {
    const float4 b = *reinterpret_cast<const float4*>(base + at);
    float4 r = make_float4(__fadd_rn(b.x, 0.0f), __fadd_rn(b.y, 0.0f), __fadd_rn(b.z, 0.0f),
                           __fadd_rn(b.w, 0.0f));
    if constexpr (Accumulate) {
      const float4 o = *reinterpret_cast<const float4*>(dtable + at);
      r = make_float4(__fadd_rn(o.x, r.x), __fadd_rn(o.y, r.y), __fadd_rn(o.z, r.z), __fadd_rn(o.w, r.w));
    }
    *reinterpret_cast<float4*>(dtable + at) = r;
  } else {
    const float r = __fadd_rn(base[at], 0.0f);
    dtable[at] = Accumulate ? __fadd_rn(dtable[at], r) : r;
  }
}

void check_shape(int64_t tokens, int64_t vocab, int64_t dim) {
  SPW_CHECK(tokens >= 0 && vocab > 0 && dim > 0, "embedding",
            "needs tokens >= 0, vocab > 0 and dim > 0, got tokens ", tokens, ", vocab ", vocab,
            ", dim ", dim);
  SPW_CHECK(tokens < (int64_t(1) << 31) && vocab < (int64_t(1) << 31), "embedding",
            "the GPU kernels take fewer than 2^31 tokens and rows, got tokens ", tokens, ", vocab ",
            vocab);
}

void sort_keys(uint64_t* keys, int64_t n, cudaStream_t stream) {
  if (n < 2) return;
  const int64_t tile = std::min(n, kTile);
  const auto tiles = static_cast<unsigned>(n / tile);
  const auto tile_threads = static_cast<unsigned>(tile / 2);
  bitonic_tile_kernel<<<tiles, tile_threads, 0, stream>>>(keys, tile, 2, tile);
  SPW_CUDA(cudaGetLastError());
  for (int64_t k = 2 * tile; k <= n; k <<= 1) {
    for (int64_t j = k / 2; j >= tile; j >>= 1) {
      bitonic_step_kernel<<<blocks_for(n / 2), kThreads, 0, stream>>>(keys, n, k, j);
      SPW_CUDA(cudaGetLastError());
    }
    bitonic_tile_kernel<<<tiles, tile_threads, 0, stream>>>(keys, tile, k, k);
    SPW_CUDA(cudaGetLastError());
  }
}

template <int V, bool Accumulate, bool HasBase>
void launch_sum_runs(const Workspace& ws, const __nv_bfloat16* dout, const float* base, float* dtable,
                     int64_t tokens, int64_t vocab, int64_t dim, cudaStream_t stream) {
  sum_runs_kernel<V, Accumulate, HasBase><<<blocks_for(tokens * (dim / V)), kThreads, 0, stream>>>(
      ws.keys, ws.run_end, dout, base, dtable, tokens, vocab, dim);
  SPW_CUDA(cudaGetLastError());
}

template <int V>
void launch_sum_runs(const Workspace& ws, const __nv_bfloat16* dout, const float* base, float* dtable,
                     int64_t tokens, int64_t vocab, int64_t dim, bool accumulate, cudaStream_t stream) {
  if (accumulate && base != nullptr) {
    launch_sum_runs<V, true, true>(ws, dout, base, dtable, tokens, vocab, dim, stream);
  } else if (accumulate) {
    launch_sum_runs<V, true, false>(ws, dout, base, dtable, tokens, vocab, dim, stream);
  } else if (base != nullptr) {
    launch_sum_runs<V, false, true>(ws, dout, base, dtable, tokens, vocab, dim, stream);
  } else {
    launch_sum_runs<V, false, false>(ws, dout, base, dtable, tokens, vocab, dim, stream);
  }
}

template <int V>
void launch_base_rows(const int32_t* run_end, const float* base, float* dtable, int64_t vocab, int64_t dim,
                      bool accumulate, cudaStream_t stream) {
  const unsigned blocks = blocks_for(vocab * (dim / V));
  if (accumulate) {
    base_rows_kernel<V, true><<<blocks, kThreads, 0, stream>>>(run_end, base, dtable, vocab, dim);
  } else {
    base_rows_kernel<V, false><<<blocks, kThreads, 0, stream>>>(run_end, base, dtable, vocab, dim);
  }
  SPW_CUDA(cudaGetLastError());
}

}  // namespace

void embedding_forward_cuda(const int32_t* ids, const bf16* table, bf16* out, int64_t tokens,
                            int64_t vocab, int64_t dim, cudaStream_t stream, int64_t first_row) {
  check_shape(tokens, vocab, dim);
  if (tokens == 0) return;
  const auto* tb = reinterpret_cast<const __nv_bfloat16*>(table);
  auto* ob = reinterpret_cast<__nv_bfloat16*>(out);
  if (dim % 8 == 0 && aligned16(table) && aligned16(out)) {
    gather_rows_kernel<8>
        <<<blocks_for(tokens * (dim / 8)), kThreads, 0, stream>>>(ids, tb, ob, tokens, vocab, dim, first_row);
  } else {
    gather_rows_kernel<1>
        <<<blocks_for(tokens * dim), kThreads, 0, stream>>>(ids, tb, ob, tokens, vocab, dim, first_row);
  }
  SPW_CUDA(cudaGetLastError());
}

void embedding_check_ids_cuda(const int32_t* ids, int64_t tokens, int64_t vocab,
                              int* first_bad_position, cudaStream_t stream) {
  check_shape(tokens, vocab, 1);
  SPW_CUDA(cudaMemsetAsync(first_bad_position, 0xff, sizeof(int), stream));
  if (tokens == 0) return;
  check_ids_kernel<<<blocks_for(tokens), kThreads, 0, stream>>>(
      ids, tokens, vocab, reinterpret_cast<unsigned*>(first_bad_position));
  SPW_CUDA(cudaGetLastError());
}

uint64_t embedding_backward_workspace_bytes(int64_t tokens, int64_t vocab) {
  return static_cast<uint64_t>(sort_length(tokens)) * sizeof(uint64_t) +
         static_cast<uint64_t>(vocab) * sizeof(int32_t);
}

void embedding_backward_cuda(const int32_t* ids, const bf16* dout, float* dtable, int64_t tokens,
                             int64_t vocab, int64_t dim, void* workspace, cudaStream_t stream,
                             bool accumulate, const float* base, int64_t first_row) {
  check_shape(tokens, vocab, dim);
  SPW_CHECK(workspace != nullptr, "embedding", "backward needs a workspace of ",
            embedding_backward_workspace_bytes(tokens, vocab), " bytes");
  const Workspace ws = carve(workspace, tokens);
  if (base == nullptr) {
    // Every row is cleared at full write bandwidth; the rows tokens use are
    // then written again with their sums. Accumulating leaves the rows alone.
    if (!accumulate) {
      SPW_CUDA(cudaMemsetAsync(dtable, 0, static_cast<size_t>(vocab * dim) * sizeof(float), stream));
    }
    if (tokens == 0) return;
  } else {
    // run_end then tells the rows tokens use (nonzero) from the rest, for
    // base_rows_kernel. Half a megabyte at LLaMA-3's vocabulary.
    SPW_CUDA(cudaMemsetAsync(ws.run_end, 0, static_cast<size_t>(vocab) * sizeof(int32_t), stream));
  }
  if (tokens > 0) {
    const int64_t n = sort_length(tokens);
    make_keys_kernel<<<blocks_for(n), kThreads, 0, stream>>>(ids, ws.keys, tokens, n, vocab, first_row);
    SPW_CUDA(cudaGetLastError());
    sort_keys(ws.keys, n, stream);
    run_ends_kernel<<<blocks_for(tokens), kThreads, 0, stream>>>(ws.keys, ws.run_end, tokens, vocab);
    SPW_CUDA(cudaGetLastError());
  }
  if (base != nullptr) {
    if (dim % 4 == 0 && aligned16(base) && aligned16(dtable)) {
      launch_base_rows<4>(ws.run_end, base, dtable, vocab, dim, accumulate, stream);
    } else {
      launch_base_rows<1>(ws.run_end, base, dtable, vocab, dim, accumulate, stream);
    }
  }
  if (tokens == 0) return;
  const auto* db = reinterpret_cast<const __nv_bfloat16*>(dout);
  if (dim % 8 == 0 && aligned16(dout) && aligned16(dtable) && (base == nullptr || aligned16(base))) {
    launch_sum_runs<8>(ws, db, base, dtable, tokens, vocab, dim, accumulate, stream);
  } else {
    launch_sum_runs<1>(ws, db, base, dtable, tokens, vocab, dim, accumulate, stream);
  }
}

}  // namespace spillway::ops

// Causal attention of new queries against a key/value cache: the decoding
// step of generation (and its prefill), where queries are few and keys many.
//
// Contract:
//   q       [batch, q_len, q_heads * head_dim]
//   k_cache [batch, cache_len, kv_heads * head_dim], rows 0 .. kv_len-1 valid
//   v_cache  likewise; cache_len is the row stride (the cache's capacity)
//   out     [batch, q_len, q_heads * head_dim]
//   Query i sits at position kv_len - q_len + i and attends keys u <= that
//   position, so with q_len == kv_len this is attention_forward's result.
// Inference only: there is no backward.
#pragma once

#include <cstdint>

namespace spillway::ops {

struct CachedAttentionShape {
  int64_t batch = 1;
  int64_t q_len = 1;
  int64_t kv_len = 1;
  int64_t cache_len = 1;
  int64_t q_heads = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 1;
};

template <typename T>
void attention_cached(const T* q, const T* k_cache, const T* v_cache, T* out,
                      const CachedAttentionShape& shape, double scale);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU: bf16 q, caches and out; scores, softmax and the weighted sum in fp32.
// Any head_dim up to kAttentionCachedCudaMaxHeadDim.
//
// A block takes a tile of rows (query, query head) that share one kv head and
// walks their keys in tiles with an online softmax, so each key tile is read
// once for every query and head of the group in the tile. When that gives too
// few blocks to fill the GPU (decoding one token, short prompts against a long
// cache), the keys are also split into ranges that run in parallel, and a
// second kernel merges their partial results through `workspace` (device
// memory, `workspace_bytes` of it; with 0 the keys are never split). The split
// depends on the shape, the GPU's SM count and the workspace size only, so
// results are bitwise repeatable on one GPU.
inline constexpr int64_t kAttentionCachedCudaMaxHeadDim = 128;
// Enough workspace for the split wherever it is chosen (see the .cu).
inline constexpr uint64_t kAttentionCachedCudaWorkspaceBytes = 16ull << 20;

void attention_cached_cuda(const bf16* q, const bf16* k_cache, const bf16* v_cache, bf16* out,
                           const CachedAttentionShape& shape, double scale, void* workspace,
                           uint64_t workspace_bytes, cudaStream_t stream);

}  // namespace spillway::ops
#endif

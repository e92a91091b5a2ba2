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

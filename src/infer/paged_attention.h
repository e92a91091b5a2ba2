// Causal attention of a batch of sequences' new queries over a paged
// key/value cache (paged_kv_blocks.h), on the CPU in float32.
//
// Layout: a cache pool holds [num_blocks, block_tokens, kv_heads * head_dim]
// rows; a sequence's row t lives in block table[t / block_tokens]. A
// sequence's queries q [n, q_heads * head_dim] sit at positions pos0 ..
// pos0 + n - 1 (their keys already written) and each attends the keys at
// positions up to its own. Each output element is summed over keys in
// position order, so a query's result does not depend on the other queries
// or sequences of the call (batch-invariant, like row_linear.h).
#pragma once

#include <cstdint>
#include <span>

namespace spillway::infer {

struct PagedQueries {
  const float* q = nullptr;  // [n, q_heads * head_dim]
  float* out = nullptr;      // likewise
  int64_t n = 0;
  int64_t pos0 = 0;
  std::span<const int32_t> table;  // the sequence's blocks
};

struct PagedAttentionShape {
  int64_t q_heads = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 1;
  int64_t block_tokens = 1;
};

void paged_attention(std::span<const PagedQueries> sequences, const float* k_pool, const float* v_pool,
                     const PagedAttentionShape& shape, float scale);

}  // namespace spillway::infer

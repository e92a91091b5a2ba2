// The GPU's side of the paged key/value cache (paged_kv_blocks.h): writing a
// step's new keys and values into their blocks, and the causal attention of
// the step's queries over them. The pools hold bf16 rows
// [num_blocks, block_tokens, kv_heads * head_dim], one pool for keys and one
// for values per layer, as the CPU's (paged_attention.h) holds floats.
//
// Rows of a step belong to any number of sequences; each row carries its
// position and where its sequence's block table starts in one array of all
// the step's tables (copied to the device each step).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/dtype.h"
#include "infer/paged_attention.h"

namespace spillway::infer {

// Device arrays describing a step's rows.
struct PagedRowsCuda {
  int64_t rows = 0;
  const int32_t* position = nullptr;     // [rows]: the row's position in its sequence
  const int32_t* table_start = nullptr;  // [rows]: where its sequence's table starts in `tables`
  const int32_t* tables = nullptr;       // every sequence's block table, one after another
};

// Heads of one head_dim a lane of a warp holds at most: head_dim <= 128.
inline constexpr int64_t kPagedAttentionCudaMaxHeadDim = 128;

// Copies row r's key k[r * row_stride ..] and value v[r * row_stride ..]
// (kv_heads * head_dim numbers each) into the pools at the row's position.
void paged_kv_write_cuda(const bf16* k, const bf16* v, int64_t row_stride, const PagedRowsCuda& rows,
                         bf16* k_pool, bf16* v_pool, const PagedAttentionShape& shape, cudaStream_t stream);

// A row of more than kPagedAttentionCudaSplitFrom keys has them cut into
// splits (one for each kPagedAttentionCudaSplitKeys, at most
// kPagedAttentionCudaMaxSplits), each split's sums made by GPU blocks of
// its own: a long history read by many multiprocessors at once.
inline constexpr int64_t kPagedAttentionCudaSplitFrom = 2048;
inline constexpr int64_t kPagedAttentionCudaSplitKeys = 512;
inline constexpr int64_t kPagedAttentionCudaMaxSplits = 8;

__host__ __device__ inline int64_t paged_attention_splits(int64_t keys) {
  if (keys <= kPagedAttentionCudaSplitFrom) return 1;
  const int64_t splits = (keys + kPagedAttentionCudaSplitKeys - 1) / kPagedAttentionCudaSplitKeys;
  return splits < kPagedAttentionCudaMaxSplits ? splits : kPagedAttentionCudaMaxSplits;
}

// Steps of more rows than this (prompts) attend with one block for all the
// query heads of a key/value head where they are 4 or 8 (LLaMA-3's), each
// head's numbers as its own block would make them.
inline constexpr int64_t kPagedAttentionCudaGroupFrom = 64;

// Floats of workspace paged_attention_cuda needs for `rows` rows.
inline int64_t paged_attention_workspace_floats(int64_t rows, const PagedAttentionShape& shape) {
  return rows * shape.q_heads * kPagedAttentionCudaMaxSplits * (shape.head_dim + 2);
}

// out[r * out_stride + h * head_dim ..] = softmax(q_r,h K^T * scale) V over
// the keys at positions 0 .. position[r] of row r's sequence (its own
// included, so the keys must be written first); q rows are q_stride apart.
// Scores, the softmax and the weighted sum in fp32, out rounded to bf16.
//
// One block per (row, query head, split) (or per row and group of heads
// sharing a key/value head: kPagedAttentionCudaGroupFrom, the same
// numbers); its 8 warps take the split's keys
// in pieces of 32 (from the split's first), piece p going to warp p % 8, each warp keeping an online
// softmax over its pieces in position order (a piece's 32 scores at once,
// one key a lane, its values then added key by key); the 8 partial results
// are merged in warp order, and a row's splits then in split order. The
// order depends on the row's position alone, never on the other rows: a
// row's output is the same bits in any batch (batch_decoder.h).
//
// `most_keys` is at least the keys (position + 1) of the row with the most:
// the splits' kernels run only where it is over kPagedAttentionCudaSplitFrom
// (a row longer than it says is left unwritten), their sums in `workspace`
// (paged_attention_workspace_floats(rows.rows) floats; null will do where
// no row splits).
void paged_attention_cuda(const bf16* q, int64_t q_stride, bf16* out, int64_t out_stride, const bf16* k_pool,
                          const bf16* v_pool, const PagedRowsCuda& rows, const PagedAttentionShape& shape,
                          float scale, int64_t most_keys, float* workspace, cudaStream_t stream);

}  // namespace spillway::infer

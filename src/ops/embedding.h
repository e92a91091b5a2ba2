// Token embedding lookup.
//
// Contract: ids [tokens] (int32), table [vocab, dim], out [tokens, dim]:
//   out[t, :] = table[ids[t], :]
// An id outside [0, vocab) throws Error("embedding", ...) naming the id and
// its position.
//
// Backward: dtable[v, :] = sum over t with ids[t] == v of dout[t, :].
// dtable is overwritten (rows no token uses become zero). The sum runs in token
// order for every row, so the result does not depend on the thread count.
// With `accumulate`, each row's sum (rounded to T) is added to what dtable
// holds instead (dtable += result; rows no token uses are left as they are),
// so gradients of several micro-batches sum in the caller's buffer.
//
// With `base` (vocab x dim, not aliasing dtable), the result is base + the
// above: dtable = base + sum, or with `accumulate` dtable += base + sum (a
// tied embedding's gradient, the lm_head's part being base:
// graph/fuse_embedding_add.h). Each element is rounded exactly as a backward
// without base followed by ops::add would round it: the row's sum is rounded
// to T, then added to base (rows no token uses: base + 0, which turns -0 into
// +0 as that add does), then, accumulating, that is added to dtable.
//
// A table split by rows (vocabulary parallelism): `table` holds rows
// [first_row, first_row + vocab) of a table of whole_rows rows (0: the
// table is whole). Ids are checked against [0, whole_rows); an id outside
// this piece's rows gives zeros, and nothing in the backward.
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t tokens, int64_t vocab,
                       int64_t dim, int64_t first_row = 0, int64_t whole_rows = 0);

template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, T* dtable, int64_t tokens,
                        int64_t vocab, int64_t dim, bool accumulate = false,
                        const T* base = nullptr, int64_t first_row = 0, int64_t whole_rows = 0);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU: bf16 table and out, fp32 dtable. A kernel cannot throw, so an id
// outside [0, vocab) is not an error here: forward writes its row as zeros and
// backward leaves it out of every sum. embedding_check_ids_cuda finds such ids:
// it sets *first_bad_position (device memory) to the smallest position of an
// id outside [0, vocab), or to -1 when every id is in range; the caller copies
// it back when it wants the CPU's error. tokens must be below 2^31.
// `first_row`: the table holds rows [first_row, first_row + vocab) of a
// table split by rows; ids outside them are other pieces' (zeros, nothing).
void embedding_forward_cuda(const int32_t* ids, const bf16* table, bf16* out, int64_t tokens,
                            int64_t vocab, int64_t dim, cudaStream_t stream, int64_t first_row = 0);
void embedding_check_ids_cuda(const int32_t* ids, int64_t tokens, int64_t vocab,
                              int* first_bad_position, cudaStream_t stream);

// Device workspace embedding_backward_cuda needs, with a base or without: the
// sort keys of the token positions (a power of two of them) and, per
// vocabulary row, where its run of sorted keys ends.
uint64_t embedding_backward_workspace_bytes(int64_t tokens, int64_t vocab);

// Deterministic without float atomics: dtable is cleared (unless
// `accumulate`), the positions are sorted by (id, position) in the workspace,
// then each row some token uses sums its tokens' dout rows in token order, in
// fp32, and writes the sum (or, with `accumulate`, adds it to the row).
//
// With `base` (fp32 [vocab, dim], not aliasing dtable): dtable = base + that
// sum, or with `accumulate` dtable += base + sum, bit for bit what this
// kernel without base followed by add_cuda (accumulating or not) gives. No
// clearing: one pass writes base + 0 (dtable += base + 0) to the rows no
// token uses, and the summing pass writes base + sum to the others.
void embedding_backward_cuda(const int32_t* ids, const bf16* dout, float* dtable, int64_t tokens,
                             int64_t vocab, int64_t dim, void* workspace, cudaStream_t stream,
                             bool accumulate = false, const float* base = nullptr, int64_t first_row = 0);

}  // namespace spillway::ops
#endif

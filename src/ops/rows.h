// Rows of a sequence moved between tensors: how a context-parallel rank
// takes its two chunks of the sequence apart and puts the gathered keys
// and values in position order (model/llama_graph.cc).
//
// Contract: src and dst are [batch, rows, row_bytes] (their own row
// counts); rows [src_first, src_first + count) of each of the batch's
// sequences in src are copied to rows [dst_first, dst_first + count) of dst.
#pragma once

#include <cstdint>

namespace spillway::ops {

struct RowCopy {
  int64_t batch = 1, row_bytes = 0;
  int64_t src_rows = 0, src_first = 0;
  int64_t dst_rows = 0, dst_first = 0;
  int64_t count = 0;
};

void copy_rows(const void* src, void* dst, const RowCopy& c);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

namespace spillway::ops {

// GPU: the same, one strided copy on `stream`.
void copy_rows_cuda(const void* src, void* dst, const RowCopy& c, cudaStream_t stream);

}  // namespace spillway::ops
#endif

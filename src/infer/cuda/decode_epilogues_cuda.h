// What follows a decode step's split matmuls, fused into the adding of their
// slices (ops/batch_linear_tc.h's batch_linear_tc_slices_cuda, added in
// ops/batch_linear_tc_slices.cuh's order): each gives the bits of the add
// into bf16 followed by the separate kernels it replaces, with a kernel and
// a round trip through memory fewer. `slices` is the matmul's
// batch_linear_tc_slices(in); the workspace holds [slices][rows][out].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/dtype.h"
#include "infer/cuda/paged_cache_cuda.h"

namespace spillway::infer {

// The q|k|v matmul's rows (out = (q_heads + 2 kv_heads) head_dim): q and k
// rotated at each row's position by ops/rope's math (inv_freq: head_dim / 2
// frequencies), q written to q (row stride q_stride) and k, v into the
// pools at the row's slot, as rope_forward_cuda then paged_kv_write_cuda.
void qkv_rope_kv_write_cuda(const float* workspace, int64_t slices, const float* inv_freq, bf16* q, int64_t q_stride,
                            const PagedRowsCuda& rows, bf16* k_pool, bf16* v_pool, const PagedAttentionShape& shape,
                            cudaStream_t stream);

// The packed gate|up matmul's rows (out = 2 ffn): act = silu(gate) * up, as
// swiglu_packed_forward_cuda.
void gate_up_swiglu_cuda(const float* workspace, int64_t slices, bf16* act, int64_t rows, int64_t ffn,
                         cudaStream_t stream);

// x += the matmul's rows (out = d), as add_cuda(x, y, x).
void residual_add_cuda(const float* workspace, int64_t slices, bf16* x, int64_t rows, int64_t d, cudaStream_t stream);

}  // namespace spillway::infer

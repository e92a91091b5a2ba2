#include "infer/cuda/decode_epilogues_cuda.h"

#include <cuda_bf16.h>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/dependent_launch.cuh"
#include "ops/batch_linear_tc_slices.cuh"
#include "ops/rope_math.cuh"
#include "ops/swiglu_math.cuh"

namespace spillway::infer {

namespace {

using ops::split_sums::sum;

// Every kernel here is launched dependent (device/cuda/dependent_launch.cuh).

// The value the matmul alone would have stored: its slices' sum in bf16.
__device__ inline float as_stored(const float* workspace, int64_t stride, int64_t slices, int64_t e) {
  return __bfloat162float(__float2bfloat16_rn(sum(workspace, stride, slices, e)));
}

// Block (r, h): head h of row r (q heads, then k, then v), a thread a pair
// of dimensions (i, i + head_dim / 2) as the rope kernel pairs them.
__global__ void qkv_rope_kv_write_kernel(const float* workspace, int64_t slices, const float* inv_freq,
                                         __nv_bfloat16* q, int64_t q_stride, PagedRowsCuda rows,
                                         __nv_bfloat16* k_pool, __nv_bfloat16* v_pool, PagedAttentionShape s) {
  dependents_may_start();
  prior_grids_wait();
  const int64_t r = blockIdx.x, h = blockIdx.y, hd = s.head_dim, half = hd / 2, i = threadIdx.x;
  const int64_t out = (s.q_heads + 2 * s.kv_heads) * hd, stride = rows.rows * out;
  const int64_t at = r * out + h * hd + i;
  float lo = as_stored(workspace, stride, slices, at), hi = as_stored(workspace, stride, slices, at + half);
  if (h < s.q_heads + s.kv_heads) {
    const float angle = ops::rope_math::angle(rows.position[r], inv_freq[i]);
    const float c = cosf(angle), sn = sinf(angle);
    float new_lo, new_hi;
    ops::rope_math::rotate(lo, hi, c, sn, new_lo, new_hi);
    lo = new_lo;
    hi = new_hi;
  }
  const __nv_bfloat16 blo = __float2bfloat16_rn(lo), bhi = __float2bfloat16_rn(hi);
  if (h < s.q_heads) {
    q[r * q_stride + h * hd + i] = blo;
    q[r * q_stride + h * hd + i + half] = bhi;
    return;
  }
  const int64_t p = rows.position[r], kv_row = s.kv_heads * hd;
  const int32_t* table = rows.tables + rows.table_start[r];
  const int64_t slot = static_cast<int64_t>(table[p / s.block_tokens]) * s.block_tokens + p % s.block_tokens;
  const bool is_key = h < s.q_heads + s.kv_heads;
  const int64_t g = h - s.q_heads - (is_key ? 0 : s.kv_heads);
  __nv_bfloat16* pool = is_key ? k_pool : v_pool;
  pool[slot * kv_row + g * hd + i] = blo;
  pool[slot * kv_row + g * hd + i + half] = bhi;
}

__global__ void gate_up_swiglu_kernel(const float* workspace, int64_t slices, __nv_bfloat16* act, int64_t rows,
                                      int64_t ffn) {
  dependents_may_start();
  prior_grids_wait();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * ffn) return;
  const int64_t r = e / ffn, j = e - r * ffn, stride = rows * 2 * ffn;
  const float gate = as_stored(workspace, stride, slices, r * 2 * ffn + j);
  const float up = as_stored(workspace, stride, slices, r * 2 * ffn + ffn + j);
  act[e] = __float2bfloat16_rn(ops::swiglu_math::silu_times(gate, up));
}

__global__ void residual_add_kernel(const float* workspace, int64_t slices, __nv_bfloat16* x, int64_t elements) {
  dependents_may_start();
  prior_grids_wait();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= elements) return;
  x[e] = __float2bfloat16_rn(__bfloat162float(x[e]) + as_stored(workspace, elements, slices, e));
}

constexpr int kThreads = 64;  // a decode step's few thousand elements still reach most SMs

unsigned blocks_for(int64_t elements) { return static_cast<unsigned>((elements + kThreads - 1) / kThreads); }

}  // namespace

void qkv_rope_kv_write_cuda(const float* workspace, int64_t slices, const float* inv_freq, bf16* q, int64_t q_stride,
                            const PagedRowsCuda& rows, bf16* k_pool, bf16* v_pool, const PagedAttentionShape& shape,
                            cudaStream_t stream) {
  SPW_CHECK(shape.head_dim % 2 == 0 && shape.head_dim <= 2048 && slices > 0, "decode epilogues",
            "head_dim ", shape.head_dim, " must be even and at most 2048, slices ", slices, " positive");
  if (rows.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows.rows), static_cast<unsigned>(shape.q_heads + 2 * shape.kv_heads));
  launch_dependent(qkv_rope_kv_write_kernel, grid, dim3(static_cast<unsigned>(shape.head_dim / 2)), 0, stream,
                   workspace, slices, inv_freq, reinterpret_cast<__nv_bfloat16*>(q), q_stride, rows,
                   reinterpret_cast<__nv_bfloat16*>(k_pool), reinterpret_cast<__nv_bfloat16*>(v_pool), shape);
  SPW_CUDA(cudaGetLastError());
}

void gate_up_swiglu_cuda(const float* workspace, int64_t slices, bf16* act, int64_t rows, int64_t ffn,
                         cudaStream_t stream) {
  if (rows * ffn == 0) return;
  launch_dependent(gate_up_swiglu_kernel, dim3(blocks_for(rows * ffn)), dim3(kThreads), 0, stream, workspace, slices,
                   reinterpret_cast<__nv_bfloat16*>(act), rows, ffn);
  SPW_CUDA(cudaGetLastError());
}

void residual_add_cuda(const float* workspace, int64_t slices, bf16* x, int64_t rows, int64_t d, cudaStream_t stream) {
  if (rows * d == 0) return;
  launch_dependent(residual_add_kernel, dim3(blocks_for(rows * d)), dim3(kThreads), 0, stream, workspace, slices,
                   reinterpret_cast<__nv_bfloat16*>(x), rows * d);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::infer

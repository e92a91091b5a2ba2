// spillway's own bf16 matrix product for Hopper (sm_90a: TMA loads, wgmma
// tensor-core instructions), which exists so that work can be fused into the
// product's epilogue, where cuBLASLt offers no hook: the MLP's SwiGLU gate is
// computed from the gate|up product while it is still in shared memory,
// instead of reading the 2 x [tokens, ffn] product back from device memory,
// SwiGLU's backward from down_proj's dX product, which is never stored, and
// RoPE's rotation of q and k from the q|k|v product before it is stored.
//
// Layout (row-major, contiguous): C[m, n] = A[m, k] * B[n, k]^T, i.e. the
// forward of a linear layer, x * W^T with W stored [out, in] like
// torch.nn.Linear. Accumulated in fp32 over all of k in one pass (no
// split-k), so the result is deterministic.
//
// Only whole tiles are handled: hopper_gemm_fits says whether a shape can
// run here; callers fall back to cuBLASLt otherwise.
#pragma once

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/dtype.h"

namespace spillway::ops {

// The kernels' tile: 128 rows of A by 256 columns of B, 64 of k per stage.
inline constexpr int64_t kHopperGemmTileM = 128;
inline constexpr int64_t kHopperGemmTileN = 256;
inline constexpr int64_t kHopperGemmTileK = 64;

// True when `device` is a Hopper GPU (compute capability 9.0) and this build
// holds sm_90a code for the kernels.
bool hopper_gemm_available(int device);

// Whether C[m, n] = A[m, k] * B[n, k]^T is whole tiles (and 16-byte aligned
// rows), so hopper_gemm can take it.
bool hopper_gemm_fits(int64_t m, int64_t n, int64_t k);

// C = A * B^T on `stream`. Throws when the shape does not fit or the device
// is not a Hopper GPU.
void hopper_gemm(const bf16* a, const bf16* b, bf16* c, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

// The MLP's gate|up projection with its SwiGLU gate:
//   gate_up[m, 2 * ffn] = x[m, k] * w_gate_up[2 * ffn, k]^T  (each row's gate, then its up)
//   out[m, ffn] = silu(gate) * up, from gate and up as rounded to bf16,
// bit-identical to swiglu_packed_forward_cuda over this gate_up.
bool hopper_gemm_swiglu_fits(int64_t m, int64_t ffn, int64_t k);
void hopper_gemm_swiglu(const bf16* x, const bf16* w_gate_up, bf16* gate_up, bf16* out, int64_t m, int64_t ffn,
                        int64_t k, cudaStream_t stream);

// Its backward through down_proj's dX: dout = dy[m, k] * w_down[k, ffn]
// (w_down as torch.nn.Linear stores it, [out = k, in = ffn]) is the
// gradient of the SwiGLU output; the kernel writes, instead of dout,
//   dgate_up[m, 2 * ffn] = swiglu_packed_backward(dout rounded to bf16, gate_up),
// bit-identical to cuBLASLt's dout followed by swiglu_packed_backward_cuda.
bool hopper_gemm_swiglu_backward_fits(int64_t m, int64_t ffn, int64_t k);
void hopper_gemm_swiglu_backward(const bf16* dy, const bf16* w_down, const bf16* gate_up, bf16* dgate_up,
                                 int64_t m, int64_t ffn, int64_t k, cudaStream_t stream);

// The q|k|v projection with its RoPE: c[m, n] = a[m, k] * b[n, k]^T, then
// the first rotated_cols columns of each row, heads of head_dim, rotated as
// rope_forward_cuda rotates them (row r is the token at position pos0 +
// r % seq), by cos_sin = rope_table_cuda(inv_freq, seq, head_dim, pos0):
// bit-identical to the product followed by the rope kernel. Needs seq and
// m whole tiles of rows and head_dim 64, 128 or 256.
bool hopper_gemm_rope_fits(int64_t m, int64_t n, int64_t k, int64_t seq, int64_t head_dim, int64_t rotated_cols);
void hopper_gemm_rope(const bf16* a, const bf16* b, bf16* c, int64_t m, int64_t n, int64_t k, const float* cos_sin,
                      int64_t seq, int64_t head_dim, int64_t rotated_cols, cudaStream_t stream);

}  // namespace spillway::ops
#endif

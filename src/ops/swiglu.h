// SwiGLU gate of LLaMA's MLP: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
//
// Contract: gate, up, out hold n elements each (the MLP's [tokens, ffn]).
// Backward, with s = sigmoid(gate):
//   dgate = dout * up * s * (1 + gate * (1 - s))
//   dup   = dout * gate * s
// dgate and dup are overwritten.
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void swiglu_forward(const T* gate, const T* up, T* out, int64_t n);

template <typename T>
void swiglu_backward(const T* dout, const T* gate, const T* up, T* dgate, T* dup, int64_t n);

// The same over a fused gate|up projection's output: gate_up [rows, 2 * cols]
// holds each row's gate then its up; out and dout are [rows, cols], and
// dgate_up has gate_up's layout. Each element is computed as above.
template <typename T>
void swiglu_packed_forward(const T* gate_up, T* out, int64_t rows, int64_t cols);
template <typename T>
void swiglu_packed_backward(const T* dout, const T* gate_up, T* dgate_up, int64_t rows, int64_t cols);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU: the contract above on bf16 tensors, each element computed in fp32.
void swiglu_forward_cuda(const bf16* gate, const bf16* up, bf16* out, int64_t n,
                         cudaStream_t stream);
void swiglu_backward_cuda(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate,
                          bf16* dup, int64_t n, cudaStream_t stream);
void swiglu_packed_forward_cuda(const bf16* gate_up, bf16* out, int64_t rows, int64_t cols, cudaStream_t stream);
void swiglu_packed_backward_cuda(const bf16* dout, const bf16* gate_up, bf16* dgate_up, int64_t rows, int64_t cols,
                                 cudaStream_t stream);

}  // namespace spillway::ops
#endif

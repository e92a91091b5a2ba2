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

}  // namespace spillway::ops

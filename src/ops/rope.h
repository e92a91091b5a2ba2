// Rotary position embedding, in Hugging Face LLaMA's "rotate half" layout:
// within each head, element i pairs with element i + head_dim/2.
//
// Contract: x, out [batch, seq, heads * head_dim] (out may alias x);
// inv_freq [head_dim / 2] from rope_inv_freq(); position of token t is pos0 + t,
// or, with `positions` ([batch, seq] int32, for packed rows whose examples
// each start again at 0), pos0 + positions[b, t].
//   angle    = float(pos) * inv_freq[i]   (computed in T)
//   out[i]      = x[i] * cos(angle) - x[i + h] * sin(angle)
//   out[i + h]  = x[i + h] * cos(angle) + x[i] * sin(angle),   h = head_dim / 2
// Backward rotates by -angle: dx = R(-angle) dout. dx may alias dout.
//
// `rotated_heads` (default: all) rotates only the first that many heads of
// each token and copies the rest unchanged: a fused q|k|v projection's output
// [batch, seq, (q_heads + 2 kv_heads) * head_dim] goes through one rope with
// q_heads + kv_heads rotated and v carried along.
//
// rope_inv_freq follows transformers' default and "llama3" rope types,
// computed in float32 as transformers does, so logits match it:
//   inv_freq[i] = 1 / theta^(2i / head_dim)
//   llama3: wavelength = 2 pi / inv_freq;
//     wavelength > original_max / low_freq_factor  -> inv_freq / factor
//     wavelength < original_max / high_freq_factor -> inv_freq unchanged
//     otherwise smooth = (original_max / wavelength - low) / (high - low),
//               inv_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq
#pragma once

#include <cstdint>
#include <vector>

namespace spillway::ops {

struct RopeScaling {
  bool llama3 = false;  // false: plain RoPE, the fields below are unused
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

std::vector<float> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling);

template <typename T>
void rope_forward(const T* x, T* out, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  const float* inv_freq, int64_t pos0, int64_t rotated_heads = -1,
                  const int32_t* positions = nullptr);

template <typename T>
void rope_backward(const T* dout, T* dx, int64_t batch, int64_t seq, int64_t heads,
                   int64_t head_dim, const float* inv_freq, int64_t pos0, int64_t rotated_heads = -1,
                   const int32_t* positions = nullptr);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU: the contract above on bf16 data; inv_freq is device memory
// (head_dim / 2 floats). Angles are formed in fp32 exactly as the CPU forms
// them (float(pos) * inv_freq[i]) and go through the accurate cosf / sinf, so
// both backends rotate by the same angle; the rotation itself runs in fp32.
// out may alias x (dx may alias dout); in place, the heads it carries are
// neither read nor written. head_dim up to 8192. positions: device memory,
// or null.
void rope_forward_cuda(const bf16* x, bf16* out, int64_t batch, int64_t seq, int64_t heads,
                       int64_t head_dim, const float* inv_freq, int64_t pos0,
                       cudaStream_t stream, int64_t rotated_heads = -1,
                       const int32_t* positions = nullptr);
void rope_backward_cuda(const bf16* dout, bf16* dx, int64_t batch, int64_t seq, int64_t heads,
                        int64_t head_dim, const float* inv_freq, int64_t pos0,
                        cudaStream_t stream, int64_t rotated_heads = -1,
                        const int32_t* positions = nullptr);

// The cosines and sines rope_forward_cuda rotates by at positions pos0 ..
// pos0 + seq - 1, bit for bit: cos_sin [2][seq][head_dim / 2], the cosines
// then the sines. For kernels that rotate in another op's epilogue
// (ops/gemm_hopper.h's hopper_gemm_rope).
void rope_table_cuda(const float* inv_freq, int64_t seq, int64_t head_dim, int64_t pos0, float* cos_sin,
                     cudaStream_t stream);

}  // namespace spillway::ops
#endif

// What the CPU decoders (llama_decoder.h, one sequence; llama_batch_decoder.h,
// a batch over a paged cache) share of a LLaMA layer: its weights as the
// checkpoint holds them, the rows' working arrays, and the parts around the
// attention, which differs only in where K and V are kept. Each decoder
// brings its own matmul: a BLAS one alone, a fixed-order one in a batch
// (row_linear.h), so that a request's bits do not depend on its neighbours.
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_weights.h"

namespace spillway::infer {

struct LlamaLayerWeights {
  const float *input_norm, *wq, *wk, *wv, *wo, *post_norm, *gate, *up, *down;
};
// Layer by layer, pointing into `w` (which must outlive them).
std::vector<LlamaLayerWeights> llama_layer_weights(const model::LlamaWeights& w);

// y[rows, out] = x[rows, in] W^T, W stored [out, in] as in the checkpoint.
using RowLinear = void (*)(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out);

// The working arrays of `n` rows through one layer at a time.
struct LlamaRows {
  LlamaRows(const model::LlamaConfig& c, int64_t n);
  int64_t n;
  std::vector<float> x, xn, rstd, q, k, v, att, proj, gate, up;
};

// The input norm and the q, k, v projections of rows.x (RoPE not applied).
void llama_qkv(RowLinear linear, const LlamaLayerWeights& L, const model::LlamaConfig& c, LlamaRows& rows);
// The attention's output (rows.att) projected and added to rows.x, then the
// MLP's residual: what follows the attention in a layer.
void llama_after_attention(RowLinear linear, const LlamaLayerWeights& L, const model::LlamaConfig& c, LlamaRows& rows);

}  // namespace spillway::infer

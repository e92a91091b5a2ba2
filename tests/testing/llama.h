// Small LLaMA shapes and token streams that many tests build on.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "model/llama_config.h"
#include "model/llama_weights.h"

namespace spillway::testing {

inline model::LlamaConfig llama_config(int64_t vocab, int64_t hidden, int64_t intermediate, int64_t layers,
                                       int64_t heads, int64_t kv_heads, bool tied = false) {
  model::LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.tie_word_embeddings = tied;
  return c;
}

// Ids in [0, vocab) from a linear congruential stream of `seed`.
inline std::vector<int32_t> random_tokens(size_t n, uint64_t seed, int32_t vocab) {
  std::vector<int32_t> t(n);
  uint64_t x = seed;
  for (auto& v : t) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

// Random weights rounded to bf16, so that a bf16 GPU decoder and a float32
// CPU one read the same numbers.
inline model::LlamaWeights bf16_random_weights(const model::LlamaConfig& c, uint64_t seed, double std) {
  auto w = model::LlamaWeights::random(c, seed, std);
  for (auto& t : w.tensors()) {
    for (float& x : t.data) x = to_float(to_bf16(x));
  }
  return w;
}

}  // namespace spillway::testing

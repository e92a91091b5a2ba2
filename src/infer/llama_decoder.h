// LLaMA inference on the CPU with a key/value cache, batch one: each call
// feeds new tokens at the next positions and returns their logits, reusing
// the keys and values of everything fed before. Reads the weights in place
// (float32), so they must outlive the decoder.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "infer/decoder.h"
#include "infer/llama_cpu_layer.h"
#include "model/llama_weights.h"

namespace spillway::infer {

class LlamaDecoder final : public Decoder {
 public:
  // `max_len` bounds prompt plus generated tokens (the cache's capacity).
  LlamaDecoder(const model::LlamaWeights& weights, int64_t max_len);

  // Logits [tokens.size(), vocab] for the fed tokens. Throws Error when the
  // cache would overflow or a token is outside the vocabulary.
  std::vector<float> forward(std::span<const int32_t> tokens) override;
  // The last row of forward()'s logits; the lm_head runs for that row only.
  std::vector<float> forward_last(std::span<const int32_t> tokens) override;

  int64_t position() const override { return pos_; }
  int64_t capacity() const override { return max_len_; }
  void reset() override { pos_ = 0; }
  std::string description() const override;

 private:
  struct KvCache {
    std::vector<float> k, v;  // [max_len, kv_heads * head_dim]
  };

  // Feeds `tokens`; logits for every row, or for the last one only.
  std::vector<float> run(std::span<const int32_t> tokens, bool all_rows);

  const model::LlamaConfig config_;
  const int64_t max_len_;
  std::vector<float> inv_freq_;
  const float* embed_;
  const float* final_norm_;
  const float* lm_head_;
  std::vector<LlamaLayerWeights> layers_;
  std::vector<KvCache> caches_;  // by layer
  int64_t pos_ = 0;
};

}  // namespace spillway::infer

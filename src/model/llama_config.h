// A LLaMA model's shape, with Hugging Face config.json's field names so that
// a config file reads straight into it.
#pragma once

#include <cstdint>
#include <string>

#include "ops/rope.h"

namespace spillway::model {

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;
  bool tie_word_embeddings = false;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Throws Error naming `source` (a file or preset) and the field at fault.
  void validate(const std::string& source) const;
};

}  // namespace spillway::model

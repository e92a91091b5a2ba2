#include "model/llama_config.h"

#include "base/limits.h"
#include "base/status.h"

namespace spillway::model {

void LlamaConfig::validate(const std::string& source) const {
  // Upper limits first in effect for every size: they keep the products
  // that size the weights and activations far from 64-bit overflow.
  auto positive = [&](int64_t v, const char* field, int64_t most) {
    SPW_CHECK(v > 0, source, field, " must be positive, got ", v);
    SPW_CHECK(v <= most, source, field, " is ", v, "; at most ", most);
  };
  positive(vocab_size, "vocab_size", limits::kMaxVocab);
  positive(hidden_size, "hidden_size", limits::kMaxHidden);
  positive(intermediate_size, "intermediate_size", limits::kMaxIntermediate);
  positive(num_hidden_layers, "num_hidden_layers", limits::kMaxLayers);
  positive(num_attention_heads, "num_attention_heads", limits::kMaxHeads);
  positive(num_key_value_heads, "num_key_value_heads", limits::kMaxHeads);
  positive(max_position_embeddings, "max_position_embeddings", limits::kMaxPositions);
  SPW_CHECK(hidden_size % num_attention_heads == 0, source, "hidden_size ", hidden_size,
            " is not a multiple of num_attention_heads ", num_attention_heads);
  SPW_CHECK(num_attention_heads % num_key_value_heads == 0, source, "num_attention_heads ",
            num_attention_heads, " is not a multiple of num_key_value_heads ", num_key_value_heads);
  SPW_CHECK(head_dim() % 2 == 0, source, "head_dim ", head_dim(), " must be even for rotary embeddings");
  SPW_CHECK(rms_norm_eps > 0, source, "rms_norm_eps must be positive, got ", rms_norm_eps);
  SPW_CHECK(rope_theta > 0, source, "rope_theta must be positive, got ", rope_theta);
}

}  // namespace spillway::model

#include "model/llama_config.h"

#include "base/status.h"

namespace spillway::model {

void LlamaConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* field) {
    SPW_CHECK(v > 0, source, field, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(max_position_embeddings, "max_position_embeddings");
  SPW_CHECK(hidden_size % num_attention_heads == 0, source, "hidden_size ", hidden_size,
            " is not a multiple of num_attention_heads ", num_attention_heads);
  SPW_CHECK(num_attention_heads % num_key_value_heads == 0, source, "num_attention_heads ",
            num_attention_heads, " is not a multiple of num_key_value_heads ", num_key_value_heads);
  SPW_CHECK(head_dim() % 2 == 0, source, "head_dim ", head_dim(), " must be even for rotary embeddings");
  SPW_CHECK(rms_norm_eps > 0, source, "rms_norm_eps must be positive, got ", rms_norm_eps);
  SPW_CHECK(rope_theta > 0, source, "rope_theta must be positive, got ", rope_theta);
}

}  // namespace spillway::model

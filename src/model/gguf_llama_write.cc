// save_gguf_llama (gguf_llama.h).
#include <vector>

#include "base/status.h"
#include "model/gguf_llama.h"
#include "model/gguf_tokenizer.h"
#include "model/gguf_write.h"

namespace spillway::model {

namespace {

// llama.cpp's general.file_type of a file whose matrices are `type`.
uint32_t file_type(GgmlType type) {
  switch (type) {
    case GgmlType::f32: return 0;
    case GgmlType::f16: return 1;
    case GgmlType::q8_0: return 7;
    case GgmlType::bf16: return 32;
    case GgmlType::q4_1: return 3;
  }
  return 0;
}

}  // namespace

void save_gguf_llama(const std::string& path, const LlamaWeights& weights, const Tokenizer* tokenizer, GgmlType type,
                     const std::string& name) {
  const LlamaConfig& c = weights.config();
  SPW_CHECK(!c.rope_scaling.llama3, path,
            "the model's llama3 RoPE scaling has no GGUF form here (llama.cpp keeps it as a rope_freqs tensor)");
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", name);
  w.add_u32("general.file_type", file_type(type));
  w.add_u32("llama.context_length", static_cast<uint32_t>(c.max_position_embeddings));
  w.add_u32("llama.embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.add_u32("llama.block_count", static_cast<uint32_t>(c.num_hidden_layers));
  w.add_u32("llama.feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  w.add_u32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim()));
  w.add_u32("llama.attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  w.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  w.add_f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.add_f32("llama.rope.freq_base", static_cast<float>(c.rope_theta));
  w.add_u32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));
  if (tokenizer) add_gguf_tokenizer(w, *tokenizer);

  std::vector<float> permuted;
  for (const NamedTensor& t : weights.tensors()) {
    GgmlType stored = t.shape.rank() == 1 ? GgmlType::f32 : type;
    if (stored == GgmlType::q8_0 && t.shape[-1] % kQ8_0BlockSize != 0) stored = GgmlType::f16;
    const bool is_q = t.name.ends_with("self_attn.q_proj.weight"), is_k = t.name.ends_with("self_attn.k_proj.weight");
    if (!is_q && !is_k) {
      w.add_tensor(gguf_tensor_name(t.name), t.shape, stored, t.data);
      continue;
    }
    permuted.resize(t.data.size());
    permute_qk_rows_to_gguf(t.data, permuted, is_q ? c.num_attention_heads : c.num_key_value_heads, c.head_dim(),
                            c.hidden_size);
    w.add_tensor(gguf_tensor_name(t.name), t.shape, stored, permuted);
  }
  w.write(path);
}

}  // namespace spillway::model

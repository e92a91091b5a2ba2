#include "model/gguf_llama.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <set>
#include <utility>

#include "base/limits.h"
#include "base/status.h"

namespace spillway::model {

namespace {

// HF's per-layer parameter names and llama.cpp's.
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

constexpr std::string_view kLayerPrefix = "model.layers.";

// Moves rows so that, within each head, row `from(j, i)` lands at
// `to(j, i)`, j in {0, 1} and i < head_dim / 2.
template <bool kToGguf>
void move_qk_rows(std::span<const float> in, std::span<float> out, int64_t heads, int64_t head_dim, int64_t cols) {
  SPW_CHECK(head_dim % 2 == 0, "q/k permutation", "head_dim ", head_dim, " is odd");
  const auto n = static_cast<size_t>(heads * head_dim * cols);
  SPW_CHECK(in.size() == n && out.size() == n, "q/k permutation", "expected ", n, " elements, got ", in.size(),
            " and ", out.size());
  const int64_t half = head_dim / 2;
  const auto row_bytes = static_cast<size_t>(cols) * sizeof(float);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t hf_row = h * head_dim + j * half + i;
        const int64_t gguf_row = h * head_dim + 2 * i + j;
        const int64_t src = kToGguf ? hf_row : gguf_row;
        const int64_t dst = kToGguf ? gguf_row : hf_row;
        std::memcpy(out.data() + dst * cols, in.data() + src * cols, row_bytes);
      }
    }
  }
}

int64_t positive(const GgufFile& f, std::string_view key, int64_t most) {
  int64_t v = f.get_int(key);
  SPW_CHECK(v > 0, f.path(), "metadata '", key, "' is ", v, " (expected a positive count)");
  SPW_CHECK(v <= most, f.path(), "metadata '", key, "' is ", v, "; at most ", most);
  return v;
}

}  // namespace

void permute_qk_rows_to_gguf(std::span<const float> hf, std::span<float> gguf, int64_t heads, int64_t head_dim,
                             int64_t cols) {
  move_qk_rows<true>(hf, gguf, heads, head_dim, cols);
}

void unpermute_qk_rows_from_gguf(std::span<const float> gguf, std::span<float> hf, int64_t heads, int64_t head_dim,
                                 int64_t cols) {
  move_qk_rows<false>(gguf, hf, heads, head_dim, cols);
}

std::string gguf_tensor_name(const std::string& hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  if (hf_name.starts_with(kLayerPrefix)) {
    size_t dot = hf_name.find('.', kLayerPrefix.size());
    if (dot != std::string::npos) {
      std::string layer = hf_name.substr(kLayerPrefix.size(), dot - kLayerPrefix.size());
      std::string_view suffix = std::string_view(hf_name).substr(dot + 1);
      for (const auto& [hf, gguf] : kLayerNames) {
        if (suffix == hf) return "blk." + layer + "." + std::string(gguf);
      }
    }
  }
  throw Error(hf_name, "not a LLaMA parameter with a GGUF name");
}

LlamaConfig gguf_llama_config(const GgufFile& f) {
  const std::string& path = f.path();
  const std::string arch = f.get_string("general.architecture");
  SPW_CHECK(arch == "llama", path, "general.architecture is '", arch, "'; spillway converts only 'llama'");

  LlamaConfig c;
  c.hidden_size = positive(f, "llama.embedding_length", limits::kMaxHidden);
  c.intermediate_size = positive(f, "llama.feed_forward_length", limits::kMaxIntermediate);
  c.num_hidden_layers = positive(f, "llama.block_count", limits::kMaxLayers);
  c.num_attention_heads = positive(f, "llama.attention.head_count", limits::kMaxHeads);
  c.num_key_value_heads = f.find("llama.attention.head_count_kv")
                              ? positive(f, "llama.attention.head_count_kv", limits::kMaxHeads)
                              : c.num_attention_heads;
  c.max_position_embeddings = positive(f, "llama.context_length", limits::kMaxPositions);
  c.rms_norm_eps = f.get_float("llama.attention.layer_norm_rms_epsilon");
  c.rope_theta = f.float_or_none("llama.rope.freq_base").value_or(10000.0);

  // The vocabulary is the embedding's row count; a token list or a
  // llama.vocab_size that disagrees means the file is not self-consistent.
  const GgufTensorInfo& embed = f.tensor("token_embd.weight");
  SPW_CHECK(embed.dims.size() == 2, path, "tensor 'token_embd.weight' has ", embed.dims.size(),
            " dimensions (expected 2)");
  c.vocab_size = embed.dims[1];
  if (auto v = f.int_or_none("llama.vocab_size")) {
    SPW_CHECK(*v == c.vocab_size, path, "llama.vocab_size ", *v, " disagrees with token_embd.weight's ",
              c.vocab_size, " rows");
  }
  if (f.find("tokenizer.ggml.tokens")) {
    size_t tokens = f.find("tokenizer.ggml.tokens")->items.size();
    SPW_CHECK(static_cast<int64_t>(tokens) <= c.vocab_size, path, "tokenizer.ggml.tokens lists ", tokens,
              " tokens but token_embd.weight has only ", c.vocab_size, " rows");
  }
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;

  SPW_CHECK(c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0, path,
            "llama.embedding_length ", c.hidden_size, " is not a multiple of llama.attention.head_count ",
            c.num_attention_heads);
  const int64_t head_dim = c.head_dim();
  for (std::string_view key : {"llama.rope.dimension_count", "llama.attention.key_length",
                               "llama.attention.value_length"}) {
    if (auto v = f.int_or_none(key)) {
      SPW_CHECK(*v == head_dim, path, "metadata '", key, "' is ", *v, " but spillway needs hidden / heads = ",
                head_dim);
    }
  }
  if (f.find("llama.rope.scaling.type")) {
    std::string type = f.get_string("llama.rope.scaling.type");
    SPW_CHECK(type == "none", path, "llama.rope.scaling.type '", type, "' is not supported");
  }
  SPW_CHECK(f.find_tensor("rope_freqs.weight") == nullptr, path,
            "tensor 'rope_freqs.weight' (LLaMA-3.1 RoPE scaling baked into per-frequency factors) is not "
            "implemented: its factors do not determine the llama3 scaling parameters spillway's RoPE takes");
  c.validate(path);
  return c;
}

void check_gguf_llama_tensors(const GgufFile& f, const LlamaConfig& c) {
  // A block_count below the file's layers would otherwise be reported as
  // one stray tensor, not as the count it is.
  int64_t layers = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (!t.name.starts_with("blk.")) continue;
    const size_t dot = t.name.find('.', 4);
    int64_t i = -1;
    std::from_chars(t.name.data() + 4, t.name.data() + (dot == std::string::npos ? t.name.size() : dot), i);
    layers = std::max(layers, i + 1);
  }
  SPW_CHECK(layers == c.num_hidden_layers, f.path(), "llama.block_count is ", c.num_hidden_layers,
            " but the file's tensors hold ", layers, " layers");
  std::set<std::string, std::less<>> used;
  const LlamaWeights expected = LlamaWeights::without_values(c);
  for (const NamedTensor& t : expected.tensors()) {
    const std::string name = gguf_tensor_name(t.name);
    const GgufTensorInfo* info = f.find_tensor(name);
    SPW_CHECK(info != nullptr, f.path(), "missing tensor '", name, "' (", t.name, ")");
    SPW_CHECK(info->shape() == t.shape, f.path(), "tensor '", name, "' has shape ", info->shape().str(),
              " (row-major) but the config needs ", t.shape.str(), " for ", t.name);
    used.insert(name);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    SPW_CHECK(used.count(t.name) == 1, f.path(), "tensor '", t.name,
              "' is not part of the LLaMA model spillway implements");
  }
}

void read_gguf_llama_tensor(const GgufFile& f, const LlamaConfig& c, const std::string& hf_name,
                            std::span<float> out) {
  const GgufTensorInfo& info = f.tensor(gguf_tensor_name(hf_name));
  const bool is_q = hf_name.ends_with("self_attn.q_proj.weight");
  const bool is_k = hf_name.ends_with("self_attn.k_proj.weight");
  if (!is_q && !is_k) return f.read_f32(info, out);
  std::vector<float> gguf_order(out.size());
  f.read_f32(info, gguf_order);
  unpermute_qk_rows_from_gguf(gguf_order, out, is_q ? c.num_attention_heads : c.num_key_value_heads, c.head_dim(),
                              c.hidden_size);
}

LlamaWeights load_gguf_llama(const GgufFile& f) {
  const LlamaConfig c = gguf_llama_config(f);
  check_gguf_llama_tensors(f, c);
  LlamaWeights w = LlamaWeights::zeros(c);
  for (NamedTensor& t : w.tensors()) read_gguf_llama_tensor(f, c, t.name, t.data);
  return w;
}

LlamaWeights load_gguf_llama(const std::string& path) { return load_gguf_llama(GgufFile(path)); }

}  // namespace spillway::model

#include "infer/llama_cpu_layer.h"

#include <string>

#include "ops/add.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"

namespace spillway::infer {

std::vector<LlamaLayerWeights> llama_layer_weights(const model::LlamaWeights& w) {
  std::vector<LlamaLayerWeights> layers;
  for (int64_t i = 0; i < w.config().num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto at = [&](const char* name) { return w.at(p + name).data.data(); };
    layers.push_back({at("input_layernorm.weight"), at("self_attn.q_proj.weight"), at("self_attn.k_proj.weight"),
                      at("self_attn.v_proj.weight"), at("self_attn.o_proj.weight"),
                      at("post_attention_layernorm.weight"), at("mlp.gate_proj.weight"), at("mlp.up_proj.weight"),
                      at("mlp.down_proj.weight")});
  }
  return layers;
}

LlamaRows::LlamaRows(const model::LlamaConfig& c, int64_t rows) : n(rows) {
  const int64_t d = c.hidden_size, q_row = c.num_attention_heads * c.head_dim(),
                kv_row = c.num_key_value_heads * c.head_dim(), ffn = c.intermediate_size;
  auto size = [](int64_t count) { return static_cast<size_t>(count); };
  x.resize(size(n * d));
  xn.resize(size(n * d));
  rstd.resize(size(n));
  q.resize(size(n * q_row));
  k.resize(size(n * kv_row));
  v.resize(size(n * kv_row));
  att.resize(size(n * q_row));
  proj.resize(size(n * d));
  gate.resize(size(n * ffn));
  up.resize(size(n * ffn));
}

void llama_qkv(RowLinear linear, const LlamaLayerWeights& L, const model::LlamaConfig& c, LlamaRows& r) {
  const int64_t d = c.hidden_size, q_row = c.num_attention_heads * c.head_dim(),
                kv_row = c.num_key_value_heads * c.head_dim();
  ops::rmsnorm_forward(r.x.data(), L.input_norm, r.xn.data(), r.rstd.data(), r.n, d, c.rms_norm_eps);
  linear(r.xn.data(), L.wq, r.q.data(), r.n, d, q_row);
  linear(r.xn.data(), L.wk, r.k.data(), r.n, d, kv_row);
  linear(r.xn.data(), L.wv, r.v.data(), r.n, d, kv_row);
}

void llama_after_attention(RowLinear linear, const LlamaLayerWeights& L, const model::LlamaConfig& c, LlamaRows& r) {
  const int64_t d = c.hidden_size, q_row = c.num_attention_heads * c.head_dim(), ffn = c.intermediate_size, n = r.n;
  linear(r.att.data(), L.wo, r.proj.data(), n, q_row, d);
  ops::add(r.x.data(), r.proj.data(), r.x.data(), n * d);
  ops::rmsnorm_forward(r.x.data(), L.post_norm, r.xn.data(), r.rstd.data(), n, d, c.rms_norm_eps);
  linear(r.xn.data(), L.gate, r.gate.data(), n, d, ffn);
  linear(r.xn.data(), L.up, r.up.data(), n, d, ffn);
  ops::swiglu_forward(r.gate.data(), r.up.data(), r.gate.data(), n * ffn);
  linear(r.gate.data(), L.down, r.proj.data(), n, ffn, d);
  ops::add(r.x.data(), r.proj.data(), r.x.data(), n * d);
}

}  // namespace spillway::infer

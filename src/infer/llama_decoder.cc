#include "infer/llama_decoder.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "base/status.h"
#include "ops/add.h"
#include "ops/attention_cached.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace spillway::infer {

namespace {
// y[rows, out] = x[rows, in] W^T, W stored [out, in] as in the checkpoint.
void linear(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out) {
  ops::matmul<float>(false, true, rows, out, in, 1.0f, x, w, 0.0f, y);
}
}  // namespace

LlamaDecoder::LlamaDecoder(const model::LlamaWeights& w, int64_t max_len)
    : config_(w.config()), max_len_(max_len) {
  const auto& c = config_;
  SPW_CHECK(max_len > 0, "generation", "the context length must be positive, got ", max_len);
  inv_freq_ = ops::rope_inv_freq(c.head_dim(), c.rope_theta, c.rope_scaling);
  embed_ = w.at("model.embed_tokens.weight").data.data();
  final_norm_ = w.at("model.norm.weight").data.data();
  lm_head_ = c.tie_word_embeddings ? embed_ : w.at("lm_head.weight").data.data();
  const size_t cache = static_cast<size_t>(max_len * c.num_key_value_heads * c.head_dim());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto at = [&](const char* name) { return w.at(p + name).data.data(); };
    layers_.push_back(Layer{at("input_layernorm.weight"), at("self_attn.q_proj.weight"),
                            at("self_attn.k_proj.weight"), at("self_attn.v_proj.weight"),
                            at("self_attn.o_proj.weight"), at("post_attention_layernorm.weight"),
                            at("mlp.gate_proj.weight"), at("mlp.up_proj.weight"), at("mlp.down_proj.weight"),
                            std::vector<float>(cache), std::vector<float>(cache)});
  }
}

std::vector<float> LlamaDecoder::forward(std::span<const int32_t> tokens) { return run(tokens, true); }

std::vector<float> LlamaDecoder::forward_last(std::span<const int32_t> tokens) {
  SPW_CHECK(!tokens.empty(), "generation", "no tokens to feed");
  return run(tokens, false);
}

std::string LlamaDecoder::description() const {
  return "cpu, " + std::to_string(omp_get_max_threads()) + " threads, float32";
}

std::vector<float> LlamaDecoder::run(std::span<const int32_t> tokens, bool all_rows) {
  const auto& c = config_;
  const auto n = static_cast<int64_t>(tokens.size());
  SPW_CHECK(pos_ + n <= max_len_, "generation", "context of ", max_len_, " tokens is full (at ", pos_,
            ", feeding ", n, ")");
  const int64_t d = c.hidden_size, hd = c.head_dim(), hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  const int64_t q_row = hq * hd, kv_row = hkv * hd, ffn = c.intermediate_size;
  auto buf = [](int64_t size) { return std::vector<float>(static_cast<size_t>(size)); };
  std::vector<float> x = buf(n * d), xn = buf(n * d), rstd = buf(n), q = buf(n * q_row), k = buf(n * kv_row),
                     v = buf(n * kv_row), att = buf(n * q_row), proj = buf(n * d), gate = buf(n * ffn),
                     up = buf(n * ffn);

  ops::embedding_forward(tokens.data(), embed_, x.data(), n, c.vocab_size, d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (Layer& L : layers_) {
    ops::rmsnorm_forward(x.data(), L.input_norm, xn.data(), rstd.data(), n, d, c.rms_norm_eps);
    linear(xn.data(), L.wq, q.data(), n, d, q_row);
    linear(xn.data(), L.wk, k.data(), n, d, kv_row);
    linear(xn.data(), L.wv, v.data(), n, d, kv_row);
    ops::rope_forward(q.data(), q.data(), 1, n, hq, hd, inv_freq_.data(), pos_);
    ops::rope_forward(k.data(), k.data(), 1, n, hkv, hd, inv_freq_.data(), pos_);
    std::copy(k.begin(), k.end(), L.k_cache.begin() + pos_ * kv_row);
    std::copy(v.begin(), v.end(), L.v_cache.begin() + pos_ * kv_row);
    ops::attention_cached(q.data(), L.k_cache.data(), L.v_cache.data(), att.data(),
                          ops::CachedAttentionShape{1, n, pos_ + n, max_len_, hq, hkv, hd}, scale);
    linear(att.data(), L.wo, proj.data(), n, q_row, d);
    ops::add(x.data(), proj.data(), x.data(), n * d);

    ops::rmsnorm_forward(x.data(), L.post_norm, xn.data(), rstd.data(), n, d, c.rms_norm_eps);
    linear(xn.data(), L.gate, gate.data(), n, d, ffn);
    linear(xn.data(), L.up, up.data(), n, d, ffn);
    ops::swiglu_forward(gate.data(), up.data(), gate.data(), n * ffn);
    linear(gate.data(), L.down, proj.data(), n, ffn, d);
    ops::add(x.data(), proj.data(), x.data(), n * d);
  }
  ops::rmsnorm_forward(x.data(), final_norm_, xn.data(), rstd.data(), n, d, c.rms_norm_eps);
  const int64_t rows = all_rows ? n : std::min<int64_t>(n, 1);
  std::vector<float> logits = buf(rows * c.vocab_size);
  linear(xn.data() + (n - rows) * d, lm_head_, logits.data(), rows, d, c.vocab_size);
  pos_ += n;
  return logits;
}

}  // namespace spillway::infer

#include "infer/llama_decoder.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "base/status.h"
#include "ops/attention_cached.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

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
  layers_ = llama_layer_weights(w);
  caches_.assign(layers_.size(), KvCache{std::vector<float>(cache), std::vector<float>(cache)});
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
  const int64_t kv_row = hkv * hd;
  LlamaRows r(c, n);
  ops::embedding_forward(tokens.data(), embed_, r.x.data(), n, c.vocab_size, d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (size_t l = 0; l < layers_.size(); ++l) {
    KvCache& cache = caches_[l];
    llama_qkv(linear, layers_[l], c, r);
    ops::rope_forward(r.q.data(), r.q.data(), 1, n, hq, hd, inv_freq_.data(), pos_);
    ops::rope_forward(r.k.data(), r.k.data(), 1, n, hkv, hd, inv_freq_.data(), pos_);
    std::copy(r.k.begin(), r.k.end(), cache.k.begin() + pos_ * kv_row);
    std::copy(r.v.begin(), r.v.end(), cache.v.begin() + pos_ * kv_row);
    ops::attention_cached(r.q.data(), cache.k.data(), cache.v.data(), r.att.data(),
                          ops::CachedAttentionShape{1, n, pos_ + n, max_len_, hq, hkv, hd}, scale);
    llama_after_attention(linear, layers_[l], c, r);
  }
  ops::rmsnorm_forward(r.x.data(), final_norm_, r.xn.data(), r.rstd.data(), n, d, c.rms_norm_eps);
  const int64_t rows = all_rows ? n : std::min<int64_t>(n, 1);
  std::vector<float> logits(static_cast<size_t>(rows * c.vocab_size));
  linear(r.xn.data() + (n - rows) * d, lm_head_, logits.data(), rows, d, c.vocab_size);
  pos_ += n;
  return logits;
}

}  // namespace spillway::infer

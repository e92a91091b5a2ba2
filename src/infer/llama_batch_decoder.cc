#include "infer/llama_batch_decoder.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "base/bytes.h"
#include "infer/paged_attention.h"
#include "infer/row_linear.h"
#include "ops/add.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace spillway::infer {

LlamaBatchDecoder::LlamaBatchDecoder(const model::LlamaWeights& w, const KvCacheOptions& cache)
    : BatchDecoder(kv_blocks_in_budget(w.config(), cache, sizeof(float)), cache.block_tokens), config_(w.config()) {
  const auto& c = config_;
  inv_freq_ = ops::rope_inv_freq(c.head_dim(), c.rope_theta, c.rope_scaling);
  embed_ = w.at("model.embed_tokens.weight").data.data();
  final_norm_ = w.at("model.norm.weight").data.data();
  lm_head_ = c.tie_word_embeddings ? embed_ : w.at("lm_head.weight").data.data();
  const auto pool = static_cast<size_t>(blocks().num_blocks() * blocks().block_tokens() * c.num_key_value_heads *
                                        c.head_dim());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto at = [&](const char* name) { return w.at(p + name).data.data(); };
    layers_.push_back(Layer{at("input_layernorm.weight"), at("self_attn.q_proj.weight"),
                            at("self_attn.k_proj.weight"), at("self_attn.v_proj.weight"),
                            at("self_attn.o_proj.weight"), at("post_attention_layernorm.weight"),
                            at("mlp.gate_proj.weight"), at("mlp.up_proj.weight"), at("mlp.down_proj.weight"),
                            std::vector<float>(pool), std::vector<float>(pool)});
  }
}

uint64_t LlamaBatchDecoder::cache_bytes() const {
  return kv_bytes_per_token(config_, sizeof(float)) *
         static_cast<uint64_t>(blocks().num_blocks() * blocks().block_tokens());
}

std::string LlamaBatchDecoder::description() const {
  return "cpu, " + std::to_string(omp_get_max_threads()) + " threads, float32, paged KV cache of " +
         std::to_string(blocks().num_blocks()) + " blocks of " + std::to_string(blocks().block_tokens()) +
         " tokens (" + format_bytes(cache_bytes()) + ")";
}

std::vector<float> LlamaBatchDecoder::run(std::span<const SequenceChunk> chunks, std::span<const int64_t> positions) {
  const auto& c = config_;
  const int64_t d = c.hidden_size, hd = c.head_dim(), hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  const int64_t q_row = hq * hd, kv_row = hkv * hd, ffn = c.intermediate_size, bt = blocks().block_tokens();
  // Every chunk's rows one after another: row offsets and the token ids.
  std::vector<int64_t> first_row;
  std::vector<int32_t> ids;
  for (const SequenceChunk& chunk : chunks) {
    first_row.push_back(static_cast<int64_t>(ids.size()));
    ids.insert(ids.end(), chunk.tokens.begin(), chunk.tokens.end());
  }
  const auto n = static_cast<int64_t>(ids.size());
  auto buf = [](int64_t size) { return std::vector<float>(static_cast<size_t>(size)); };
  std::vector<float> x = buf(n * d), xn = buf(n * d), rstd = buf(n), q = buf(n * q_row), k = buf(n * kv_row),
                     v = buf(n * kv_row), att = buf(n * q_row), proj = buf(n * d), gate = buf(n * ffn),
                     up = buf(n * ffn);
  std::vector<PagedQueries> queries;
  for (size_t i = 0; i < chunks.size(); ++i) {
    queries.push_back(PagedQueries{q.data() + first_row[i] * q_row, att.data() + first_row[i] * q_row,
                                   static_cast<int64_t>(chunks[i].tokens.size()), positions[i],
                                   blocks().table(chunks[i].sequence)});
  }
  const PagedAttentionShape shape{hq, hkv, hd, bt};
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));

  ops::embedding_forward(ids.data(), embed_, x.data(), n, c.vocab_size, d);
  for (Layer& L : layers_) {
    ops::rmsnorm_forward(x.data(), L.input_norm, xn.data(), rstd.data(), n, d, c.rms_norm_eps);
    linear_rows(xn.data(), L.wq, q.data(), n, d, q_row);
    linear_rows(xn.data(), L.wk, k.data(), n, d, kv_row);
    linear_rows(xn.data(), L.wv, v.data(), n, d, kv_row);
    for (size_t i = 0; i < chunks.size(); ++i) {
      const int64_t rows = queries[i].n, r0 = first_row[i];
      ops::rope_forward(q.data() + r0 * q_row, q.data() + r0 * q_row, 1, rows, hq, hd, inv_freq_.data(), positions[i]);
      ops::rope_forward(k.data() + r0 * kv_row, k.data() + r0 * kv_row, 1, rows, hkv, hd, inv_freq_.data(),
                        positions[i]);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = positions[i] + r;
        const int64_t slot = queries[i].table[static_cast<size_t>(t / bt)] * bt + t % bt;
        std::copy_n(k.data() + (r0 + r) * kv_row, kv_row, L.k_pool.data() + slot * kv_row);
        std::copy_n(v.data() + (r0 + r) * kv_row, kv_row, L.v_pool.data() + slot * kv_row);
      }
    }
    paged_attention(queries, L.k_pool.data(), L.v_pool.data(), shape, scale);
    linear_rows(att.data(), L.wo, proj.data(), n, q_row, d);
    ops::add(x.data(), proj.data(), x.data(), n * d);

    ops::rmsnorm_forward(x.data(), L.post_norm, xn.data(), rstd.data(), n, d, c.rms_norm_eps);
    linear_rows(xn.data(), L.gate, gate.data(), n, d, ffn);
    linear_rows(xn.data(), L.up, up.data(), n, d, ffn);
    ops::swiglu_forward(gate.data(), up.data(), gate.data(), n * ffn);
    linear_rows(gate.data(), L.down, proj.data(), n, ffn, d);
    ops::add(x.data(), proj.data(), x.data(), n * d);
  }
  // Only each chunk's last row goes on to the lm_head.
  const auto last = static_cast<int64_t>(chunks.size());
  std::vector<float> tail = buf(last * d), tail_rstd = buf(last);
  for (int64_t i = 0; i < last; ++i) {
    const int64_t row = first_row[static_cast<size_t>(i)] + queries[static_cast<size_t>(i)].n - 1;
    std::copy_n(x.data() + row * d, d, tail.data() + i * d);
  }
  ops::rmsnorm_forward(tail.data(), final_norm_, xn.data(), tail_rstd.data(), last, d, c.rms_norm_eps);
  std::vector<float> logits = buf(last * c.vocab_size);
  linear_rows(xn.data(), lm_head_, logits.data(), last, d, c.vocab_size);
  return logits;
}

}  // namespace spillway::infer

#include "infer/llama_batch_decoder.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "base/bytes.h"
#include "infer/paged_attention.h"
#include "infer/row_linear.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

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
  layers_ = llama_layer_weights(w);
  pools_.assign(layers_.size(), KvPool{std::vector<float>(pool), std::vector<float>(pool)});
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

std::span<const float> LlamaBatchDecoder::run(std::span<const SequenceChunk> chunks,
                                              std::span<const int64_t> positions) {
  const auto& c = config_;
  const int64_t d = c.hidden_size, hd = c.head_dim(), hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  const int64_t q_row = hq * hd, kv_row = hkv * hd, bt = blocks().block_tokens();
  // Every chunk's rows one after another: row offsets and the token ids.
  std::vector<int64_t> first_row;
  std::vector<int32_t> ids;
  for (const SequenceChunk& chunk : chunks) {
    first_row.push_back(static_cast<int64_t>(ids.size()));
    ids.insert(ids.end(), chunk.tokens.begin(), chunk.tokens.end());
  }
  const auto n = static_cast<int64_t>(ids.size());
  auto buf = [](int64_t size) { return std::vector<float>(static_cast<size_t>(size)); };
  LlamaRows r(c, n);
  std::vector<PagedQueries> queries;
  for (size_t i = 0; i < chunks.size(); ++i) {
    queries.push_back(PagedQueries{r.q.data() + first_row[i] * q_row, r.att.data() + first_row[i] * q_row,
                                   static_cast<int64_t>(chunks[i].tokens.size()), positions[i],
                                   blocks().table(chunks[i].sequence)});
  }
  const PagedAttentionShape shape{hq, hkv, hd, bt};
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));

  ops::embedding_forward(ids.data(), embed_, r.x.data(), n, c.vocab_size, d);
  for (size_t l = 0; l < layers_.size(); ++l) {
    KvPool& pool = pools_[l];
    llama_qkv(linear_rows, layers_[l], c, r);
    for (size_t i = 0; i < chunks.size(); ++i) {
      const int64_t rows = queries[i].n, r0 = first_row[i];
      float *q = r.q.data() + r0 * q_row, *k = r.k.data() + r0 * kv_row;
      ops::rope_forward(q, q, 1, rows, hq, hd, inv_freq_.data(), positions[i]);
      ops::rope_forward(k, k, 1, rows, hkv, hd, inv_freq_.data(), positions[i]);
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t t = positions[i] + row;
        const int64_t slot = queries[i].table[static_cast<size_t>(t / bt)] * bt + t % bt;
        std::copy_n(r.k.data() + (r0 + row) * kv_row, kv_row, pool.k.data() + slot * kv_row);
        std::copy_n(r.v.data() + (r0 + row) * kv_row, kv_row, pool.v.data() + slot * kv_row);
      }
    }
    paged_attention(queries, pool.k.data(), pool.v.data(), shape, scale);
    llama_after_attention(linear_rows, layers_[l], c, r);
  }
  // Only each chunk's last row goes on to the lm_head.
  const auto last = static_cast<int64_t>(chunks.size());
  std::vector<float> tail = buf(last * d), tail_rstd = buf(last);
  for (int64_t i = 0; i < last; ++i) {
    const int64_t row = first_row[static_cast<size_t>(i)] + queries[static_cast<size_t>(i)].n - 1;
    std::copy_n(r.x.data() + row * d, d, tail.data() + i * d);
  }
  ops::rmsnorm_forward(tail.data(), final_norm_, r.xn.data(), tail_rstd.data(), last, d, c.rms_norm_eps);
  logits_ = buf(last * c.vocab_size);
  linear_rows(r.xn.data(), lm_head_, logits_.data(), last, d, c.vocab_size);
  return logits_;
}

}  // namespace spillway::infer

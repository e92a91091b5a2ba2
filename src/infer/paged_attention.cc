#include "infer/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "infer/row_linear.h"

namespace spillway::infer {

void paged_attention(std::span<const PagedQueries> sequences, const float* k_pool, const float* v_pool,
                     const PagedAttentionShape& s, float scale) {
  const int64_t hd = s.head_dim, group = s.q_heads / s.kv_heads;
  const int64_t q_row = s.q_heads * hd, kv_row = s.kv_heads * hd;
  // One work item per (sequence, query, head), spread over the threads.
  std::vector<std::pair<int64_t, int64_t>> rows;  // (sequence, query)
  for (size_t c = 0; c < sequences.size(); ++c) {
    for (int64_t i = 0; i < sequences[c].n; ++i) rows.emplace_back(static_cast<int64_t>(c), i);
  }
  const auto items = static_cast<int64_t>(rows.size()) * s.q_heads;
#pragma omp parallel
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 4)
    for (int64_t item = 0; item < items; ++item) {
      const auto [c, i] = rows[static_cast<size_t>(item / s.q_heads)];
      const int64_t h = item % s.q_heads, g = h / group;
      const PagedQueries& seq = sequences[static_cast<size_t>(c)];
      const float* q = seq.q + i * q_row + h * hd;
      const int64_t keys = seq.pos0 + i + 1;
      auto row_of = [&](const float* pool, int64_t t) {
        const int64_t block = seq.table[static_cast<size_t>(t / s.block_tokens)];
        return pool + (block * s.block_tokens + t % s.block_tokens) * kv_row + g * hd;
      };
      scores.resize(static_cast<size_t>(keys));
      float top = -INFINITY;
      for (int64_t t = 0; t < keys; ++t) {
        scores[static_cast<size_t>(t)] = dot_fixed_order(q, row_of(k_pool, t), hd) * scale;
        top = std::max(top, scores[static_cast<size_t>(t)]);
      }
      float total = 0;
      for (float& e : scores) total += (e = std::exp(e - top));
      float* out = seq.out + i * q_row + h * hd;
      std::fill(out, out + hd, 0.0f);
      for (int64_t t = 0; t < keys; ++t) {
        const float p = scores[static_cast<size_t>(t)] / total;
        const float* v = row_of(v_pool, t);
        for (int64_t d = 0; d < hd; ++d) out[d] += p * v[d];
      }
    }
  }
}

}  // namespace spillway::infer

#include "ops/attention_cached.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status.h"

namespace spillway::ops {

template <typename T>
void attention_cached(const T* q, const T* k_cache, const T* v_cache, T* out,
                      const CachedAttentionShape& s, double scale) {
  SPW_CHECK(s.q_len <= s.kv_len && s.kv_len <= s.cache_len, "attention_cached", "q_len ", s.q_len,
            ", kv_len ", s.kv_len, " and cache_len ", s.cache_len, " must be ordered");
  SPW_CHECK(s.q_heads % s.kv_heads == 0, "attention_cached", s.q_heads, " query heads are not a multiple of ",
            s.kv_heads, " kv heads");
  const int64_t group = s.q_heads / s.kv_heads, d = s.head_dim;
  const int64_t q_row = s.q_heads * d, kv_row = s.kv_heads * d;
  const int64_t work = s.batch * s.q_heads * s.q_len;
#pragma omp parallel
  {
    std::vector<T> scores(static_cast<size_t>(s.kv_len));
    std::vector<T> acc(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t i = w % s.q_len, h = (w / s.q_len) % s.q_heads, b = w / (s.q_len * s.q_heads);
      const int64_t kvh = h / group, pos = s.kv_len - s.q_len + i;
      const T* qi = q + (b * s.q_len + i) * q_row + h * d;
      const T* kb = k_cache + b * s.cache_len * kv_row + kvh * d;
      const T* vb = v_cache + b * s.cache_len * kv_row + kvh * d;
      T max_score = -INFINITY;
      for (int64_t u = 0; u <= pos; ++u) {
        T dot = 0;
        for (int64_t j = 0; j < d; ++j) dot += qi[j] * kb[u * kv_row + j];
        scores[static_cast<size_t>(u)] = dot * static_cast<T>(scale);
        max_score = std::max(max_score, scores[static_cast<size_t>(u)]);
      }
      T sum = 0;
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t u = 0; u <= pos; ++u) {
        T p = std::exp(scores[static_cast<size_t>(u)] - max_score);
        sum += p;
        for (int64_t j = 0; j < d; ++j) acc[static_cast<size_t>(j)] += p * vb[u * kv_row + j];
      }
      T* o = out + (b * s.q_len + i) * q_row + h * d;
      for (int64_t j = 0; j < d; ++j) o[j] = acc[static_cast<size_t>(j)] / sum;
    }
  }
}

template void attention_cached<float>(const float*, const float*, const float*, float*,
                                      const CachedAttentionShape&, double);
template void attention_cached<double>(const double*, const double*, const double*, double*,
                                       const CachedAttentionShape&, double);

}  // namespace spillway::ops

#include "ops/attention_cached.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ops/attention.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

// Full causal attention over kv_len positions, keeping the last q_len rows,
// must equal the cached attention of those q_len queries.
TEST(AttentionCached, MatchesTheLastRowsOfFullAttention) {
  struct Case { int64_t batch, kv_len, q_len, cache_len, q_heads, kv_heads, d; };
  for (Case c : {Case{1, 1, 1, 4, 2, 1, 8}, Case{2, 9, 1, 16, 4, 2, 8}, Case{1, 37, 5, 40, 6, 2, 16},
                 Case{2, 13, 13, 13, 3, 3, 4}}) {
    AttentionShape full{c.batch, c.kv_len, c.q_heads, c.kv_heads, c.d};
    auto q = testing::random_vector(c.batch * c.kv_len * c.q_heads * c.d, 1);
    auto k = testing::random_vector(c.batch * c.kv_len * c.kv_heads * c.d, 2);
    auto v = testing::random_vector(c.batch * c.kv_len * c.kv_heads * c.d, 3);
    std::vector<double> out(q.size()), lse(static_cast<size_t>(c.batch * c.q_heads * c.kv_len));
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
    attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), full, scale);

    // The cache holds the same keys with room to spare; queries are the last rows.
    const int64_t q_row = c.q_heads * c.d, kv_row = c.kv_heads * c.d;
    std::vector<float> kc(static_cast<size_t>(c.batch * c.cache_len * kv_row), NAN), vc(kc);
    std::vector<float> qs(static_cast<size_t>(c.batch * c.q_len * q_row));
    std::vector<double> want(qs.size());
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t u = 0; u < c.kv_len; ++u) {
        for (int64_t j = 0; j < kv_row; ++j) {
          kc[static_cast<size_t>((b * c.cache_len + u) * kv_row + j)] = static_cast<float>(k[static_cast<size_t>((b * c.kv_len + u) * kv_row + j)]);
          vc[static_cast<size_t>((b * c.cache_len + u) * kv_row + j)] = static_cast<float>(v[static_cast<size_t>((b * c.kv_len + u) * kv_row + j)]);
        }
      }
      for (int64_t i = 0; i < c.q_len; ++i) {
        for (int64_t j = 0; j < q_row; ++j) {
          size_t src = static_cast<size_t>((b * c.kv_len + c.kv_len - c.q_len + i) * q_row + j);
          qs[static_cast<size_t>((b * c.q_len + i) * q_row + j)] = static_cast<float>(q[src]);
          want[static_cast<size_t>((b * c.q_len + i) * q_row + j)] = out[src];
        }
      }
    }
    std::vector<float> got(qs.size(), NAN);
    attention_cached(qs.data(), kc.data(), vc.data(), got.data(),
                     CachedAttentionShape{c.batch, c.q_len, c.kv_len, c.cache_len, c.q_heads, c.kv_heads, c.d}, scale);
    EXPECT_LT(testing::rel_error(got, want), 1e-5) << "kv_len " << c.kv_len << " q_len " << c.q_len;
  }
}

}  // namespace
}  // namespace spillway::ops

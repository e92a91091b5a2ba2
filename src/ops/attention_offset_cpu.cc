// Attention whose queries start at an offset into a longer key sequence
// (context parallelism: a rank's chunk of the queries against every rank's
// keys), row by row: the CPU's reference for it. Every sum runs in a fixed
// order, in T.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/status.h"
#include "ops/attention.h"

namespace spillway::ops {

namespace {

struct Offsets {
  int64_t seq, keys, q_heads, dim, group, q_stride, kv_stride;
  explicit Offsets(const AttentionShape& s)
      : seq(s.seq), keys(s.keys()), q_heads(s.q_heads), dim(s.head_dim), group(s.q_heads / s.kv_heads),
        q_stride(s.q_heads * s.head_dim), kv_stride(s.kv_heads * s.head_dim) {}
  int64_t q_at(int64_t b, int64_t t, int64_t h) const { return (b * seq + t) * q_stride + h * dim; }
  int64_t kv_at(int64_t b, int64_t u, int64_t h) const { return (b * keys + u) * kv_stride + (h / group) * dim; }
  int64_t stat_at(int64_t b, int64_t h, int64_t t) const { return (b * q_heads + h) * seq + t; }
};

void check_offset(const AttentionShape& s) {
  SPW_CHECK(!s.packed_qkv && s.q_heads > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 && s.head_dim > 0,
            "attention", "bad heads for an offset attention: ", s.q_heads, " query, ", s.kv_heads, " key/value");
  SPW_CHECK(s.q_start >= 0 && s.q_start + s.seq <= s.keys(), "attention", "queries [", s.q_start, ", ",
            s.q_start + s.seq, ") do not lie within the ", s.keys(), " keys");
}

// Row t's scaled scores against keys [0, visible), into `scores`.
template <typename T>
void scores_of(const T* q, const T* k, const Offsets& at, int64_t b, int64_t h, int64_t t, int64_t visible, T scale,
               std::vector<T>& scores) {
  const T* qr = q + at.q_at(b, t, h);
  for (int64_t u = 0; u < visible; ++u) {
    const T* kr = k + at.kv_at(b, u, h);
    T dot = 0;
    for (int64_t d = 0; d < at.dim; ++d) dot += qr[d] * kr[d];
    scores[static_cast<size_t>(u)] = dot * scale;
  }
}

}  // namespace

template <typename T>
void attention_offset_forward(const T* q, const T* k, const T* v, T* out, T* lse, const AttentionShape& shape,
                              double scale) {
  check_offset(shape);
  const Offsets at(shape);
  std::vector<T> p(static_cast<size_t>(at.keys));
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < at.q_heads; ++h) {
      for (int64_t t = 0; t < at.seq; ++t) {
        const int64_t visible = shape.q_start + t + 1;
        scores_of(q, k, at, b, h, t, visible, static_cast<T>(scale), p);
        const T max = *std::max_element(p.begin(), p.begin() + visible);
        T sum = 0;
        for (int64_t u = 0; u < visible; ++u) sum += p[static_cast<size_t>(u)] = std::exp(p[static_cast<size_t>(u)] - max);
        T* o = out + at.q_at(b, t, h);
        std::fill(o, o + at.dim, T(0));
        for (int64_t u = 0; u < visible; ++u) {
          const T w = p[static_cast<size_t>(u)] / sum;
          const T* vr = v + at.kv_at(b, u, h);
          for (int64_t d = 0; d < at.dim; ++d) o[d] += w * vr[d];
        }
        lse[at.stat_at(b, h, t)] = max + std::log(sum);
      }
    }
  }
}

template <typename T>
void attention_offset_backward(const T* dout, const T* q, const T* k, const T* v, const T* out, const T* lse, T* dq,
                               T* dk, T* dv, const AttentionShape& shape, double scale) {
  check_offset(shape);
  const Offsets at(shape);
  const T s = static_cast<T>(scale);
  std::fill(dq, dq + shape.batch * at.seq * at.q_stride, T(0));
  std::fill(dk, dk + shape.batch * at.keys * at.kv_stride, T(0));
  std::fill(dv, dv + shape.batch * at.keys * at.kv_stride, T(0));
  std::vector<T> p(static_cast<size_t>(at.keys));
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < at.q_heads; ++h) {
      for (int64_t t = 0; t < at.seq; ++t) {
        const int64_t visible = shape.q_start + t + 1;
        scores_of(q, k, at, b, h, t, visible, s, p);
        const T* go = dout + at.q_at(b, t, h);
        const T* o = out + at.q_at(b, t, h);
        T row_dot = 0;
        for (int64_t d = 0; d < at.dim; ++d) row_dot += go[d] * o[d];
        const T row_lse = lse[at.stat_at(b, h, t)];
        const T* qr = q + at.q_at(b, t, h);
        T* gq = dq + at.q_at(b, t, h);
        for (int64_t u = 0; u < visible; ++u) {
          const T prob = std::exp(p[static_cast<size_t>(u)] - row_lse);
          const T* vr = v + at.kv_at(b, u, h);
          const T* kr = k + at.kv_at(b, u, h);
          T* gv = dv + at.kv_at(b, u, h);
          T* gk = dk + at.kv_at(b, u, h);
          T dp = 0;
          for (int64_t d = 0; d < at.dim; ++d) {
            gv[d] += prob * go[d];
            dp += go[d] * vr[d];
          }
          const T ds = prob * (dp - row_dot) * s;
          for (int64_t d = 0; d < at.dim; ++d) {
            gq[d] += ds * kr[d];
            gk[d] += ds * qr[d];
          }
        }
      }
    }
  }
}

template void attention_offset_forward<float>(const float*, const float*, const float*, float*, float*,
                                              const AttentionShape&, double);
template void attention_offset_forward<double>(const double*, const double*, const double*, double*, double*,
                                               const AttentionShape&, double);
template void attention_offset_backward<float>(const float*, const float*, const float*, const float*, const float*,
                                               const float*, float*, float*, float*, const AttentionShape&, double);
template void attention_offset_backward<double>(const double*, const double*, const double*, const double*,
                                                const double*, const double*, double*, double*, double*,
                                                const AttentionShape&, double);

}  // namespace spillway::ops

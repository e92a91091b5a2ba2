#include "ops/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/status.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using testing::cast_vector;
using testing::random_vector;
using testing::rel_error;

int64_t q_numel(const AttentionShape& s) { return s.batch * s.seq * s.q_heads * s.head_dim; }
int64_t kv_numel(const AttentionShape& s) { return s.batch * s.seq * s.kv_heads * s.head_dim; }
int64_t lse_numel(const AttentionShape& s) { return s.batch * s.q_heads * s.seq; }
double default_scale(const AttentionShape& s) {
  return 1.0 / std::sqrt(static_cast<double>(s.head_dim));
}

std::string describe(const AttentionShape& s) {
  return "batch " + std::to_string(s.batch) + ", seq " + std::to_string(s.seq) + ", heads " +
         std::to_string(s.q_heads) + "/" + std::to_string(s.kv_heads) + ", head_dim " +
         std::to_string(s.head_dim);
}

template <typename T>
struct Inputs {
  std::vector<T> q, k, v;
};

Inputs<double> random_inputs(const AttentionShape& s, uint64_t seed) {
  return {random_vector(q_numel(s), seed), random_vector(kv_numel(s), seed + 1),
          random_vector(kv_numel(s), seed + 2)};
}

template <typename T>
Inputs<T> cast_inputs(const Inputs<double>& in) {
  return {cast_vector<T>(in.q), cast_vector<T>(in.k), cast_vector<T>(in.v)};
}

// The plain O(seq^2) definition in float64: the whole masked score row, its
// max, its exponentials, their sum.
void attention_reference(const Inputs<double>& in, const AttentionShape& s, double scale,
                         std::vector<double>& out, std::vector<double>& lse) {
  const int64_t d = s.head_dim, group = s.q_heads / s.kv_heads;
  out.assign(static_cast<size_t>(q_numel(s)), 0.0);
  lse.assign(static_cast<size_t>(lse_numel(s)), 0.0);
  std::vector<double> score(static_cast<size_t>(s.seq));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t g = h / group;
      for (int64_t t = 0; t < s.seq; ++t) {
        const double* qt = in.q.data() + ((b * s.seq + t) * s.q_heads + h) * d;
        double max_score = -INFINITY;
        for (int64_t u = 0; u <= t; ++u) {
          const double* ku = in.k.data() + ((b * s.seq + u) * s.kv_heads + g) * d;
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += qt[i] * ku[i];
          score[u] = scale * dot;
          max_score = std::max(max_score, score[u]);
        }
        double sum = 0;
        for (int64_t u = 0; u <= t; ++u) sum += std::exp(score[u] - max_score);
        double* ot = out.data() + ((b * s.seq + t) * s.q_heads + h) * d;
        for (int64_t u = 0; u <= t; ++u) {
          const double p = std::exp(score[u] - max_score) / sum;
          const double* vu = in.v.data() + ((b * s.seq + u) * s.kv_heads + g) * d;
          for (int64_t i = 0; i < d; ++i) ot[i] += p * vu[i];
        }
        lse[(b * s.q_heads + h) * s.seq + t] = max_score + std::log(sum);
      }
    }
  }
}

template <typename T>
struct Forward {
  std::vector<T> out, lse;
};

// Outputs start as NaN, so an element the kernel never writes fails the test.
template <typename T>
Forward<T> run_forward(const Inputs<T>& in, const AttentionShape& s, double scale) {
  Forward<T> f{std::vector<T>(q_numel(s), std::numeric_limits<T>::quiet_NaN()),
               std::vector<T>(lse_numel(s), std::numeric_limits<T>::quiet_NaN())};
  attention_forward(in.q.data(), in.k.data(), in.v.data(), f.out.data(), f.lse.data(), s, scale);
  return f;
}

template <typename T>
struct Grads {
  std::vector<T> dq, dk, dv;
};

template <typename T>
Grads<T> run_backward(const Inputs<T>& in, const Forward<T>& f, const std::vector<T>& dout,
                      const AttentionShape& s, double scale) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  Grads<T> g{std::vector<T>(q_numel(s), nan), std::vector<T>(kv_numel(s), nan),
             std::vector<T>(kv_numel(s), nan)};
  attention_backward(dout.data(), in.q.data(), in.k.data(), in.v.data(), f.out.data(),
                     f.lse.data(), g.dq.data(), g.dk.data(), g.dv.data(), s, scale);
  return g;
}

template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Sequence lengths cross the 64-row tile edge without landing on it; the head
// pairs cover plain, grouped (4/1, 6/2) and many-head attention.
const AttentionShape kForwardShapes[] = {
    {1, 1, 1, 1, 4},   {2, 7, 4, 1, 16},  {1, 65, 6, 2, 64}, {2, 130, 8, 8, 80},
    {1, 130, 4, 1, 4}, {2, 65, 1, 1, 80}, {1, 7, 6, 2, 64},  {2, 1, 8, 8, 16},
};

TEST(AttentionForward, MatchesFloat64Reference) {
  for (const AttentionShape& s : kForwardShapes) {
    for (double scale : {default_scale(s), 1.0}) {
      const Inputs<double> in = random_inputs(s, 100 + s.seq + s.head_dim);
      std::vector<double> want_out, want_lse;
      attention_reference(in, s, scale, want_out, want_lse);

      const Forward<double> got_d = run_forward(in, s, scale);
      EXPECT_LE(rel_error(got_d.out, want_out), 1e-12) << "double out, " << describe(s);
      EXPECT_LE(rel_error(got_d.lse, want_lse), 1e-12) << "double lse, " << describe(s);

      const Forward<float> got_f = run_forward(cast_inputs<float>(in), s, scale);
      EXPECT_LE(rel_error(got_f.out, want_out), 1e-5) << "float out, " << describe(s);
      EXPECT_LE(rel_error(got_f.lse, want_lse), 1e-5) << "float lse, " << describe(s);
    }
  }
}

// Scores far apart (scale 8) make exp underflow for most keys and move the row
// max from tile to tile, which the running rescale has to absorb.
TEST(AttentionForward, HandlesPeakedScores) {
  const AttentionShape s{1, 200, 2, 1, 16};
  const Inputs<double> in = random_inputs(s, 7);
  std::vector<double> want_out, want_lse;
  attention_reference(in, s, 8.0, want_out, want_lse);
  const Forward<float> got = run_forward(cast_inputs<float>(in), s, 8.0);
  EXPECT_LE(rel_error(got.out, want_out), 1e-5);
  EXPECT_LE(rel_error(got.lse, want_lse), 1e-5);
}

TEST(AttentionBackward, MatchesFiniteDifferences) {
  const AttentionShape shapes[] = {{2, 3, 3, 1, 5}, {1, 130, 2, 1, 3}, {1, 70, 2, 2, 3}};
  for (const AttentionShape& s : shapes) {
    const double scale = 0.7;
    Inputs<double> in = random_inputs(s, 300 + s.seq);
    const std::vector<double> upstream = random_vector(q_numel(s), 400 + s.seq);
    const auto loss = [&] { return testing::dot(run_forward(in, s, scale).out, upstream); };
    const std::vector<double> want_dq = testing::numeric_gradient(in.q, loss);
    const std::vector<double> want_dk = testing::numeric_gradient(in.k, loss);
    const std::vector<double> want_dv = testing::numeric_gradient(in.v, loss);

    const Grads<double> got = run_backward(in, run_forward(in, s, scale), upstream, s, scale);
    EXPECT_LE(rel_error(got.dq, want_dq), 1e-6) << "dq, " << describe(s);
    EXPECT_LE(rel_error(got.dk, want_dk), 1e-6) << "dk, " << describe(s);
    EXPECT_LE(rel_error(got.dv, want_dv), 1e-6) << "dv, " << describe(s);
  }
}

TEST(AttentionBackward, FloatMatchesDouble) {
  const AttentionShape shapes[] = {{2, 130, 6, 2, 64}, {1, 75, 8, 8, 80}};
  for (const AttentionShape& s : shapes) {
    const double scale = default_scale(s);
    const Inputs<double> in = random_inputs(s, 500);
    const std::vector<double> upstream = random_vector(q_numel(s), 501);
    const Grads<double> want = run_backward(in, run_forward(in, s, scale), upstream, s, scale);

    const Inputs<float> in_f = cast_inputs<float>(in);
    const Grads<float> got =
        run_backward(in_f, run_forward(in_f, s, scale), cast_vector<float>(upstream), s, scale);
    EXPECT_LE(rel_error(got.dq, widen(want.dq)), 1e-5) << "dq, " << describe(s);
    EXPECT_LE(rel_error(got.dk, widen(want.dk)), 1e-5) << "dk, " << describe(s);
    EXPECT_LE(rel_error(got.dv, widen(want.dv)), 1e-5) << "dv, " << describe(s);
  }
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(Attention, ThreadCountDoesNotChangeBits) {
  const AttentionShape s{2, 130, 6, 2, 64};
  const double scale = default_scale(s);
  const Inputs<float> in = cast_inputs<float>(random_inputs(s, 600));
  const std::vector<float> upstream = random_vector<float>(q_numel(s), 601);
  const int saved = omp_get_max_threads();

  omp_set_num_threads(1);
  const Forward<float> f1 = run_forward(in, s, scale);
  const Grads<float> g1 = run_backward(in, f1, upstream, s, scale);
  omp_set_num_threads(4);
  const Forward<float> f4 = run_forward(in, s, scale);
  const Grads<float> g4 = run_backward(in, f4, upstream, s, scale);
  omp_set_num_threads(saved);

  EXPECT_TRUE(same_bits(f1.out, f4.out));
  EXPECT_TRUE(same_bits(f1.lse, f4.lse));
  EXPECT_TRUE(same_bits(g1.dq, g4.dq));
  EXPECT_TRUE(same_bits(g1.dk, g4.dk));
  EXPECT_TRUE(same_bits(g1.dv, g4.dv));
}

TEST(Attention, RejectsHeadsThatDoNotGroup) {
  const AttentionShape s{1, 4, 6, 4, 8};
  const Inputs<float> in = cast_inputs<float>(random_inputs(s, 1));
  std::vector<float> out(q_numel(s)), lse(lse_numel(s));
  EXPECT_THROW(attention_forward(in.q.data(), in.k.data(), in.v.data(), out.data(), lse.data(),
                                 s, 1.0),
               Error);
}

}  // namespace
}  // namespace spillway::ops

#include "ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "base/status.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using testing::cast_vector;
using testing::random_vector;
using testing::rel_error;

struct RopeCase {
  int64_t batch, seq, heads, head_dim, pos0;
};

// Covers odd sequence lengths, a start position past zero, one and three
// heads, and the smallest head (one rotating pair).
const RopeCase kCases[] = {
    {1, 1, 1, 2, 0}, {2, 7, 3, 8, 5}, {1, 13, 1, 64, 0}, {3, 5, 3, 64, 37}, {2, 9, 1, 2, 11},
};

int64_t numel(const RopeCase& c) { return c.batch * c.seq * c.heads * c.head_dim; }

std::vector<double> inv_freq_default_f64(int64_t head_dim, double theta) {
  std::vector<double> f(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = 1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  return f;
}

enum class Band { kHigh, kMedium, kLow };

Band band_of(double wavelen, const RopeScaling& s) {
  const double original = static_cast<double>(s.original_max_position_embeddings);
  if (wavelen < original / s.high_freq_factor) return Band::kHigh;
  if (wavelen > original / s.low_freq_factor) return Band::kLow;
  return Band::kMedium;
}

std::vector<double> inv_freq_llama3_f64(int64_t head_dim, double theta, const RopeScaling& s) {
  std::vector<double> f = inv_freq_default_f64(head_dim, theta);
  const double original = static_cast<double>(s.original_max_position_embeddings);
  for (double& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    switch (band_of(wavelen, s)) {
      case Band::kHigh:
        break;
      case Band::kLow:
        x /= s.factor;
        break;
      case Band::kMedium: {
        const double smooth =
            (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - smooth) * x / s.factor + smooth * x;
        break;
      }
    }
  }
  return f;
}

RopeScaling llama3_scaling() {
  RopeScaling s;
  s.llama3 = true;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 8192;
  return s;
}

// Worst element-wise relative difference; a float32 table computed in a few
// float32 steps lands within a few ulps (6e-8 each) of the float64 formula.
double max_elementwise_rel(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / std::abs(want[i]));
  }
  return worst;
}

// out = R(angle) x in float64, with the angle formed the way the kernel for T
// forms it (in T), so the float kernel is held to its own rounding contract.
template <typename T>
std::vector<double> rope_reference(const std::vector<double>& x, const RopeCase& c,
                                   const std::vector<float>& inv_freq, double sign) {
  std::vector<double> out(x.size());
  const int64_t half = c.head_dim / 2;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.seq; ++t) {
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t base = ((b * c.seq + t) * c.heads + h) * c.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const T angle_t = static_cast<T>(c.pos0 + t) * static_cast<T>(inv_freq[i]);
          const double angle = static_cast<double>(angle_t);
          const double cs = std::cos(angle), sn = sign * std::sin(angle);
          const double lo = x[base + i], hi = x[base + i + half];
          out[base + i] = lo * cs - hi * sn;
          out[base + i + half] = hi * cs + lo * sn;
        }
      }
    }
  }
  return out;
}

template <typename T>
std::vector<T> run_forward(const std::vector<T>& x, const RopeCase& c,
                           const std::vector<float>& inv_freq) {
  std::vector<T> out(x.size(), std::numeric_limits<T>::quiet_NaN());
  rope_forward(x.data(), out.data(), c.batch, c.seq, c.heads, c.head_dim, inv_freq.data(),
               c.pos0);
  return out;
}

template <typename T>
std::vector<T> run_backward(const std::vector<T>& dout, const RopeCase& c,
                            const std::vector<float>& inv_freq) {
  std::vector<T> dx(dout.size(), std::numeric_limits<T>::quiet_NaN());
  rope_backward(dout.data(), dx.data(), c.batch, c.seq, c.heads, c.head_dim, inv_freq.data(),
                c.pos0);
  return dx;
}

TEST(RopeInvFreq, DefaultMatchesFloat64Formula) {
  for (int64_t head_dim : {2, 8, 64, 128}) {
    for (double theta : {10000.0, 500000.0}) {
      const std::vector<float> got = rope_inv_freq(head_dim, theta, RopeScaling{});
      EXPECT_LE(max_elementwise_rel(got, inv_freq_default_f64(head_dim, theta)), 1e-6)
          << "head_dim " << head_dim << ", theta " << theta;
    }
  }
}

TEST(RopeInvFreq, Llama3MatchesFloat64FormulaInEveryBand) {
  const RopeScaling scaling = llama3_scaling();
  for (int64_t head_dim : {64, 128}) {
    const std::vector<float> got = rope_inv_freq(head_dim, 500000.0, scaling);
    const std::vector<double> want = inv_freq_llama3_f64(head_dim, 500000.0, scaling);
    EXPECT_LE(max_elementwise_rel(got, want), 1e-6) << "head_dim " << head_dim;

    int bands[3] = {0, 0, 0};
    for (double f : inv_freq_default_f64(head_dim, 500000.0)) {
      ++bands[static_cast<int>(band_of(2 * std::numbers::pi / f, scaling))];
    }
    EXPECT_GT(bands[0], 0) << "no high-frequency entry, head_dim " << head_dim;
    EXPECT_GT(bands[1], 0) << "no smoothed entry, head_dim " << head_dim;
    EXPECT_GT(bands[2], 0) << "no low-frequency entry, head_dim " << head_dim;
  }
}

TEST(RopeInvFreq, Llama3DiffersFromDefaultOnlyBelowHighFrequencies) {
  const std::vector<float> plain = rope_inv_freq(128, 500000.0, RopeScaling{});
  const std::vector<float> scaled = rope_inv_freq(128, 500000.0, llama3_scaling());
  EXPECT_EQ(plain[0], scaled[0]);
  EXPECT_FLOAT_EQ(plain.back() / 8, scaled.back());
}

TEST(RopeInvFreq, RejectsOddHeadDim) {
  EXPECT_THROW(rope_inv_freq(7, 10000.0, RopeScaling{}), Error);
}

TEST(RopeForward, MatchesFloat64Reference) {
  for (const RopeCase& c : kCases) {
    for (bool llama3 : {false, true}) {
      const std::vector<float> inv_freq =
          rope_inv_freq(c.head_dim, 500000.0, llama3 ? llama3_scaling() : RopeScaling{});
      const std::vector<double> x = random_vector(numel(c), 11 + c.head_dim);
      const std::vector<double> got_d = run_forward(x, c, inv_freq);
      EXPECT_LE(rel_error(got_d, rope_reference<double>(x, c, inv_freq, 1.0)), 1e-14)
          << "double, head_dim " << c.head_dim << ", seq " << c.seq;
      const std::vector<float> got_f = run_forward(cast_vector<float>(x), c, inv_freq);
      EXPECT_LE(rel_error(got_f, rope_reference<float>(x, c, inv_freq, 1.0)), 1e-6)
          << "float, head_dim " << c.head_dim << ", seq " << c.seq;
    }
  }
}

TEST(RopeBackward, MatchesFiniteDifferences) {
  const std::vector<float> inv_freq = rope_inv_freq(8, 10000.0, RopeScaling{});
  for (const RopeCase& c : {RopeCase{2, 3, 3, 8, 4}, RopeCase{1, 5, 1, 8, 0}}) {
    std::vector<double> x = random_vector(numel(c), 21);
    const std::vector<double> upstream = random_vector(numel(c), 22);
    const std::vector<double> want = testing::numeric_gradient(
        x, [&] { return testing::dot(run_forward(x, c, inv_freq), upstream); });
    EXPECT_LE(rel_error(run_backward(upstream, c, inv_freq), want), 1e-6) << "seq " << c.seq;
  }
}

TEST(RopeBackward, MatchesFloat64Reference) {
  for (const RopeCase& c : kCases) {
    const std::vector<float> inv_freq = rope_inv_freq(c.head_dim, 10000.0, RopeScaling{});
    const std::vector<double> dout = random_vector(numel(c), 31);
    EXPECT_LE(rel_error(run_backward(dout, c, inv_freq),
                        rope_reference<double>(dout, c, inv_freq, -1.0)),
              1e-14);
    EXPECT_LE(rel_error(run_backward(cast_vector<float>(dout), c, inv_freq),
                        rope_reference<float>(dout, c, inv_freq, -1.0)),
              1e-6);
  }
}

template <typename T>
void expect_in_place_matches(const RopeCase& c) {
  const std::vector<float> inv_freq = rope_inv_freq(c.head_dim, 10000.0, RopeScaling{});
  const std::vector<T> x = cast_vector<T>(random_vector(numel(c), 41));
  std::vector<T> buffer = x;
  rope_forward(buffer.data(), buffer.data(), c.batch, c.seq, c.heads, c.head_dim,
               inv_freq.data(), c.pos0);
  EXPECT_EQ(buffer, run_forward(x, c, inv_freq));
  std::vector<T> grad = x;
  rope_backward(grad.data(), grad.data(), c.batch, c.seq, c.heads, c.head_dim, inv_freq.data(),
                c.pos0);
  EXPECT_EQ(grad, run_backward(x, c, inv_freq));
}

TEST(RopeForward, InPlaceEqualsOutOfPlace) {
  for (const RopeCase& c : kCases) {
    expect_in_place_matches<float>(c);
    expect_in_place_matches<double>(c);
  }
}

TEST(RopeBackward, UndoesForward) {
  for (const RopeCase& c : kCases) {
    const std::vector<float> inv_freq = rope_inv_freq(c.head_dim, 500000.0, llama3_scaling());
    const std::vector<double> x = random_vector(numel(c), 51);
    EXPECT_LE(rel_error(run_backward(run_forward(x, c, inv_freq), c, inv_freq), x), 1e-15);
    const std::vector<float> xf = cast_vector<float>(x);
    EXPECT_LE(rel_error(run_backward(run_forward(xf, c, inv_freq), c, inv_freq), x), 1e-6);
  }
}

// A packed q|k|v row: the leading heads rotate exactly as a rope over them
// alone would, the others come through as they were, in both directions.
TEST(RopeForward, RotatesOnlyTheLeadingHeadsOfAPackedRow) {
  const int64_t batch = 2, seq = 5, q_heads = 4, kv_heads = 2, head_dim = 8, pos0 = 3;
  const int64_t heads = q_heads + 2 * kv_heads, rotated = q_heads + kv_heads, rows = batch * seq;
  const std::vector<float> inv_freq = rope_inv_freq(head_dim, 10000.0, {});
  const std::vector<double> x = random_vector(rows * heads * head_dim, 61);
  for (bool forward : {true, false}) {
    std::vector<double> got(x.size());
    (forward ? rope_forward<double> : rope_backward<double>)(x.data(), got.data(), batch, seq, heads, head_dim,
                                                             inv_freq.data(), pos0, rotated, nullptr);
    // The rotated heads alone, through the plain rope.
    std::vector<double> lead, want_lead(static_cast<size_t>(rows * rotated * head_dim));
    for (int64_t r = 0; r < rows; ++r) {
      lead.insert(lead.end(), x.begin() + r * heads * head_dim, x.begin() + (r * heads + rotated) * head_dim);
    }
    (forward ? rope_forward<double> : rope_backward<double>)(lead.data(), want_lead.data(), batch, seq, rotated,
                                                             head_dim, inv_freq.data(), pos0, -1, nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < heads * head_dim; ++j) {
        const size_t at = static_cast<size_t>(r * heads * head_dim + j);
        const double want = j < rotated * head_dim ? want_lead[static_cast<size_t>(r * rotated * head_dim + j)] : x[at];
        ASSERT_EQ(got[at], want) << (forward ? "forward" : "backward") << ", row " << r << ", element " << j;
      }
    }
  }
  std::vector<double> out(x.size());
  EXPECT_THROW(rope_forward(x.data(), out.data(), batch, seq, heads, head_dim, inv_freq.data(), 0, heads + 1), Error);
}

TEST(RopeForward, RejectsOddHeadDim) {
  const std::vector<float> inv_freq(4, 1.0f);
  std::vector<float> x(9, 1.0f);
  EXPECT_THROW(rope_forward(x.data(), x.data(), 1, 1, 1, 9, inv_freq.data(), 0), Error);
}

// Packed rows: token (b, t) at position pos0 + positions[b, t] is rotated
// bit for bit as a lone token at that position, forward and backward.
TEST(RopePositions, EachTokenAsIfAloneAtItsPosition) {
  const int64_t batch = 2, seq = 6, heads = 3, head_dim = 8, pos0 = 2;
  const std::vector<int32_t> positions = {0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 4, 5};
  const std::vector<float> inv_freq = rope_inv_freq(head_dim, 10000.0, {});
  const std::vector<float> x = testing::random_vector<float>(batch * seq * heads * head_dim, 3);
  std::vector<float> out(x.size()), dx(x.size()), one(static_cast<size_t>(heads * head_dim));
  rope_forward(x.data(), out.data(), batch, seq, heads, head_dim, inv_freq.data(), pos0, -1, positions.data());
  rope_backward(x.data(), dx.data(), batch, seq, heads, head_dim, inv_freq.data(), pos0, -1, positions.data());
  for (int64_t token = 0; token < batch * seq; ++token) {
    const float* xt = x.data() + token * heads * head_dim;
    const int64_t at = pos0 + positions[static_cast<size_t>(token)];
    rope_forward(xt, one.data(), 1, 1, heads, head_dim, inv_freq.data(), at);
    EXPECT_EQ(0, std::memcmp(one.data(), out.data() + token * heads * head_dim, one.size() * sizeof(float)))
        << "forward, token " << token;
    rope_backward(xt, one.data(), 1, 1, heads, head_dim, inv_freq.data(), at);
    EXPECT_EQ(0, std::memcmp(one.data(), dx.data() + token * heads * head_dim, one.size() * sizeof(float)))
        << "backward, token " << token;
  }
}

}  // namespace
}  // namespace spillway::ops

#include "ops/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::cast_vector;
using spillway::testing::random_vector;
using spillway::testing::rel_error;

// Each value rounded to float, so the float kernel and the double reference
// read the same inputs.
std::vector<double> as_float_values(const std::vector<double>& v) {
  auto rounded = cast_vector<float>(v);
  return {rounded.begin(), rounded.end()};
}

struct State {
  std::vector<double> param, m, v;
};

// torch.optim.AdamW's single-tensor step, in double.
void reference_step(State& s, const std::vector<double>& grad, const AdamWHyper& hp) {
  const double bias1 = 1 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bias2 = 1 - std::pow(hp.beta2, static_cast<double>(hp.step));
  for (size_t i = 0; i < grad.size(); ++i) {
    s.param[i] *= 1 - hp.lr * hp.weight_decay;
    s.m[i] = hp.beta1 * s.m[i] + (1 - hp.beta1) * grad[i];
    s.v[i] = hp.beta2 * s.v[i] + (1 - hp.beta2) * grad[i] * grad[i];
    const double denom = std::sqrt(s.v[i]) / std::sqrt(bias2) + hp.eps;
    s.param[i] -= hp.lr / bias1 * s.m[i] / denom;
  }
}

template <typename T>
void run_steps(const std::vector<double>& param0, int64_t n, int steps, AdamWHyper hp,
               uint64_t grad_seed, double tolerance) {
  State ref{param0, std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  std::vector<T> param = cast_vector<T>(param0), m(n, T(0)), v(n, T(0));
  for (int s = 1; s <= steps; ++s) {
    hp.step = s;
    // Gradients of changing scale, so the moments do not settle.
    auto grad = random_vector(n, grad_seed + s, -s * 0.5, s * 0.3);
    auto grad_t = cast_vector<T>(grad);
    reference_step(ref, std::vector<double>(grad_t.begin(), grad_t.end()), hp);
    adamw_update<T>(param.data(), grad_t.data(), m.data(), v.data(), n, hp);
  }
  EXPECT_LE(rel_error(param, ref.param), tolerance) << "n=" << n;
  EXPECT_LE(rel_error(m, ref.m), tolerance) << "n=" << n;
  EXPECT_LE(rel_error(v, ref.v), tolerance) << "n=" << n;
}

TEST(AdamW, MatchesTorchFormulaOverSeveralSteps) {
  AdamWHyper hp;
  hp.lr = 1e-2;
  hp.beta1 = 0.9;
  hp.beta2 = 0.95;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  uint64_t seed = 1;
  // 70001 passes the kernel's threshold for threads.
  for (int64_t n : {1, 5, 64, 129, 70001}) {
    auto param0 = as_float_values(random_vector(n, seed++));
    run_steps<float>(param0, n, 6, hp, seed, 1e-5);
    run_steps<double>(param0, n, 6, hp, seed, 1e-12);
    seed += 10;
  }
}

TEST(AdamW, FirstStepMovesEachWeightByLearningRate) {
  // Bias correction makes step 1 move every weight by lr * sign(g) (the
  // corrected moments are g and g^2), whatever the betas; decay comes first.
  AdamWHyper hp;
  hp.lr = 0.01;
  hp.beta1 = 0.8;
  hp.beta2 = 0.99;
  hp.weight_decay = 0.5;
  hp.eps = 0;
  std::vector<double> param = {1.0, -2.0, 0.5}, grad = {0.3, -4.0, 1e-3}, m(3, 0.0), v(3, 0.0);
  adamw_update<double>(param.data(), grad.data(), m.data(), v.data(), 3, hp);
  const double decay = 1 - 0.01 * 0.5;
  EXPECT_LE(rel_error(param, {1.0 * decay - 0.01, -2.0 * decay + 0.01, 0.5 * decay - 0.01}), 1e-14);
}

// grad_scale (the mean over micro-batches and the clipping factor, folded
// into one number) enters as g = grad * float(scale): bit for bit the update
// from gradients scaled beforehand, and within rounding of the double formula
// on the scaled gradient.
TEST(AdamW, GradScaleMultipliesTheGradientFirst) {
  AdamWHyper hp;
  hp.lr = 1e-2;
  hp.weight_decay = 0.1;
  hp.grad_scale = 0.5 * 0.123456789;  // 2 micro-batches, clipped
  const int64_t n = 70001;
  auto param0 = cast_vector<float>(random_vector(n, 31));
  std::vector<float> p_scaled = param0, m_scaled(n, 0.0f), v_scaled(n, 0.0f);
  std::vector<float> p_pre = param0, m_pre(n, 0.0f), v_pre(n, 0.0f);
  State ref{{param0.begin(), param0.end()}, std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int s = 1; s <= 3; ++s) {
    hp.step = s;
    auto grad = cast_vector<float>(random_vector(n, 40 + s, -4.0, 4.0));
    adamw_update<float>(p_scaled.data(), grad.data(), m_scaled.data(), v_scaled.data(), n, hp);
    std::vector<float> pre(grad.size());
    for (int64_t i = 0; i < n; ++i) pre[i] = grad[i] * static_cast<float>(hp.grad_scale);
    AdamWHyper unscaled = hp;
    unscaled.grad_scale = 1.0;
    adamw_update<float>(p_pre.data(), pre.data(), m_pre.data(), v_pre.data(), n, unscaled);
    std::vector<double> grad_ref(grad.size());
    for (int64_t i = 0; i < n; ++i) grad_ref[i] = static_cast<double>(grad[i]) * hp.grad_scale;
    reference_step(ref, grad_ref, hp);
  }
  EXPECT_EQ(p_scaled, p_pre);
  EXPECT_EQ(m_scaled, m_pre);
  EXPECT_EQ(v_scaled, v_pre);
  EXPECT_LE(rel_error(p_scaled, ref.param), 1e-5);
  EXPECT_LE(rel_error(m_scaled, ref.m), 1e-5);
}

// bf16 moments. The reference is the same formula in double with the
// contract's rounding: the update reads this step's unrounded moments, which
// are then rounded to bf16 for the next step. m_scale follows the same
// recurrence on absolute values: the size of the terms m sums, which bounds
// how far an earlier step's rounding can carry where they cancel.
void reference_step_bf16_moments(State& s, std::vector<double>& m_scale,
                                 const std::vector<double>& grad, const AdamWHyper& hp) {
  const double bias1 = 1 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bias2 = 1 - std::pow(hp.beta2, static_cast<double>(hp.step));
  for (size_t i = 0; i < grad.size(); ++i) {
    const double g = grad[i] * hp.grad_scale;
    s.param[i] *= 1 - hp.lr * hp.weight_decay;
    const double m = hp.beta1 * s.m[i] + (1 - hp.beta1) * g;
    const double v = hp.beta2 * s.v[i] + (1 - hp.beta2) * g * g;
    m_scale[i] = hp.beta1 * m_scale[i] + (1 - hp.beta1) * std::abs(g);
    s.param[i] -= hp.lr / bias1 * m / (std::sqrt(v) / std::sqrt(bias2) + hp.eps);
    s.m[i] = to_float(to_bf16(static_cast<float>(m)));
    s.v[i] = to_float(to_bf16(static_cast<float>(v)));
  }
}

std::vector<double> widened(const std::vector<bf16>& v) {
  std::vector<double> out;
  for (bf16 h : v) out.push_back(to_float(h));
  return out;
}

std::vector<bf16> random_bf16_vector(int64_t n, uint64_t seed, double lo, double hi) {
  std::vector<bf16> out;
  for (double x : random_vector(n, seed, lo, hi)) out.push_back(to_bf16(static_cast<float>(x)));
  return out;
}

// Each stored moment within a bf16 step (2^-7 relative) of the reference's,
// measured against the moment plus the size of the terms it sums: the kernel
// rounds a float, the reference a double, the two can land on either side of
// a rounding boundary, and such a difference carries into the next steps.
void expect_within_bf16_rounding(const std::vector<bf16>& got, const std::vector<double>& want,
                                 const std::vector<double>& scale, const char* what, int64_t n) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_float(got[i]);
    ASSERT_LE(std::abs(g - want[i]), 0x1p-7 * (std::abs(want[i]) + scale[i]) + 1e-30)
        << what << " at " << i << ", n " << n;
  }
}

TEST(AdamW, Bf16MomentsMatchReferenceOverSteps) {
  uint64_t seed = 200;
  for (double weight_decay : {0.0, 0.1}) {
    for (int64_t n : {1, 5, 129, 70001}) {
      AdamWHyper hp;
      hp.lr = 1e-2;
      hp.weight_decay = weight_decay;
      hp.grad_scale = 0.5 * 0.123456789;  // 2 micro-batches, clipped
      auto param = cast_vector<float>(random_vector(n, seed++));
      auto m = random_bf16_vector(n, seed++, -0.01, 0.01);
      auto v = random_bf16_vector(n, seed++, 0.0, 1e-4);
      State ref{{param.begin(), param.end()}, widened(m), widened(v)};
      std::vector<double> m_scale(ref.m), v_scale(n, 0.0);  // v sums no signs
      for (double& x : m_scale) x = std::abs(x);
      for (int s = 1; s <= 3; ++s) {
        hp.step = s;
        auto grad = cast_vector<float>(random_vector(n, seed++, -4.0 * s, 3.0 * s));
        adamw_update_bf16_moments(param.data(), grad.data(), m.data(), v.data(), n, hp);
        reference_step_bf16_moments(ref, m_scale, {grad.begin(), grad.end()}, hp);
      }
      EXPECT_LE(rel_error(param, ref.param), 1e-6) << "n " << n << ", decay " << weight_decay;
      expect_within_bf16_rounding(m, ref.m, m_scale, "m", n);
      expect_within_bf16_rounding(v, ref.v, v_scale, "v", n);
    }
  }
}

// The contract's choice, bit for bit: one step updates the parameter exactly
// as the fp32 kernel does from the widened moments (the unrounded new m and v
// enter the update), and stores the fp32 kernel's new m and v rounded to bf16.
TEST(AdamW, Bf16MomentsStepIsTheFp32StepRoundedAfter) {
  AdamWHyper hp;
  hp.lr = 1e-2;
  hp.weight_decay = 0.1;
  hp.grad_scale = 0.37;
  hp.step = 4;
  const int64_t n = 70001;
  auto param = cast_vector<float>(random_vector(n, 301));
  auto grad = cast_vector<float>(random_vector(n, 302, -3.0, 3.0));
  auto m = random_bf16_vector(n, 303, -0.1, 0.1);
  auto v = random_bf16_vector(n, 304, 0.0, 0.1);
  std::vector<float> p32 = param, m32, v32;
  for (bf16 h : m) m32.push_back(to_float(h));
  for (bf16 h : v) v32.push_back(to_float(h));
  adamw_update_bf16_moments(param.data(), grad.data(), m.data(), v.data(), n, hp);
  adamw_update<float>(p32.data(), grad.data(), m32.data(), v32.data(), n, hp);
  EXPECT_EQ(param, p32);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(m[i].bits, to_bf16(m32[i]).bits) << "m at " << i;
    ASSERT_EQ(v[i].bits, to_bf16(v32[i]).bits) << "v at " << i;
  }
}

TEST(AdamW, Bf16MomentsRejectStepZero) {
  AdamWHyper hp;
  hp.step = 0;
  float p = 1, g = 1;
  bf16 m, v;
  EXPECT_THROW(adamw_update_bf16_moments(&p, &g, &m, &v, 1, hp), Error);
}

TEST(AdamW, RejectsStepZero) {
  AdamWHyper hp;
  hp.step = 0;
  float p = 1, g = 1, m = 0, v = 0;
  EXPECT_THROW(adamw_update<float>(&p, &g, &m, &v, 1, hp), Error);
}

}  // namespace
}  // namespace spillway::ops

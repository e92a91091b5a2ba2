#include "ops/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::cast_vector;
using spillway::testing::dot;
using spillway::testing::numeric_gradient;
using spillway::testing::random_vector;
using spillway::testing::rel_error;

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// Each value rounded to float, so the float kernel and the double reference
// read the same inputs.
std::vector<double> as_float_values(const std::vector<double>& v) {
  auto rounded = cast_vector<float>(v);
  return {rounded.begin(), rounded.end()};
}

// Sizes past the kernel's threshold for threads are included.
const int64_t kSizes[] = {1, 5, 64, 129, 1000, 70001};

TEST(SwiGLU, FloatMatchesReference) {
  uint64_t seed = 1;
  for (int64_t n : kSizes) {
    auto gate = as_float_values(random_vector(n, seed++, -8.0, 8.0));
    auto up = as_float_values(random_vector(n, seed++));
    auto dout = as_float_values(random_vector(n, seed++));
    std::vector<double> want_out, want_dgate, want_dup;
    for (int64_t i = 0; i < n; ++i) {
      const double s = sigmoid(gate[i]);
      want_out.push_back(gate[i] * s * up[i]);
      // d/dg of g * s(g) is s + g * s * (1 - s).
      want_dgate.push_back(dout[i] * up[i] * (s + gate[i] * s * (1 - s)));
      want_dup.push_back(dout[i] * gate[i] * s);
    }
    auto gf = cast_vector<float>(gate), uf = cast_vector<float>(up), df = cast_vector<float>(dout);
    std::vector<float> out(n), dgate(n), dup(n);
    swiglu_forward<float>(gf.data(), uf.data(), out.data(), n);
    swiglu_backward<float>(df.data(), gf.data(), uf.data(), dgate.data(), dup.data(), n);
    EXPECT_LE(rel_error(out, want_out), 1e-5) << "n=" << n;
    EXPECT_LE(rel_error(dgate, want_dgate), 1e-5) << "n=" << n;
    EXPECT_LE(rel_error(dup, want_dup), 1e-5) << "n=" << n;
  }
}

TEST(SwiGLU, SaturatesWithoutNaN) {
  std::vector<float> gate = {-200.0f, -90.0f, 90.0f, 200.0f}, up(4, 2.0f), out(4);
  std::vector<float> dout(4, 1.0f), dgate(4), dup(4);
  swiglu_forward<float>(gate.data(), up.data(), out.data(), 4);
  swiglu_backward<float>(dout.data(), gate.data(), up.data(), dgate.data(), dup.data(), 4);
  EXPECT_LE(rel_error(out, {0.0, 0.0, 180.0, 400.0}), 1e-6);
  EXPECT_LE(rel_error(dgate, {0.0, 0.0, 2.0, 2.0}), 1e-6);
  EXPECT_LE(rel_error(dup, {0.0, 0.0, 90.0, 200.0}), 1e-6);
}

TEST(SwiGLU, BackwardMatchesFiniteDifferences) {
  uint64_t seed = 100;
  for (int64_t n : {1, 7, 33}) {
    auto gate = random_vector(n, seed++, -4.0, 4.0);
    auto up = random_vector(n, seed++);
    auto upstream = random_vector(n, seed++);
    std::vector<double> out(n);
    auto loss = [&] {
      swiglu_forward<double>(gate.data(), up.data(), out.data(), n);
      return dot(out, upstream);
    };
    auto want_dgate = numeric_gradient(gate, loss);
    auto want_dup = numeric_gradient(up, loss);
    std::vector<double> dgate(n), dup(n);
    swiglu_backward<double>(upstream.data(), gate.data(), up.data(), dgate.data(), dup.data(), n);
    EXPECT_LE(rel_error(dgate, want_dgate), 1e-6) << "n=" << n;
    EXPECT_LE(rel_error(dup, want_dup), 1e-6) << "n=" << n;
  }
}

// The fused gate|up layout: each row's gate then its up, through the same
// per-element kernels, so the results equal the separate tensors' exactly.
TEST(SwiGLU, PackedGateUpEqualsSeparateTensors) {
  const int64_t rows = 5, cols = 7;
  const std::vector<double> gate_up = random_vector(2 * rows * cols, 71, -4, 4), dout = random_vector(rows * cols, 72);
  std::vector<double> gate, up;
  for (int64_t r = 0; r < rows; ++r) {
    gate.insert(gate.end(), gate_up.begin() + 2 * r * cols, gate_up.begin() + (2 * r + 1) * cols);
    up.insert(up.end(), gate_up.begin() + (2 * r + 1) * cols, gate_up.begin() + (2 * r + 2) * cols);
  }
  std::vector<double> out(gate.size()), want(gate.size()), dgate(gate.size()), dup(gate.size());
  std::vector<double> dgate_up(gate_up.size());
  swiglu_packed_forward(gate_up.data(), out.data(), rows, cols);
  swiglu_forward(gate.data(), up.data(), want.data(), rows * cols);
  EXPECT_EQ(out, want);
  swiglu_packed_backward(dout.data(), gate_up.data(), dgate_up.data(), rows, cols);
  swiglu_backward(dout.data(), gate.data(), up.data(), dgate.data(), dup.data(), rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      EXPECT_EQ(dgate_up[static_cast<size_t>(2 * r * cols + j)], dgate[static_cast<size_t>(r * cols + j)]);
      EXPECT_EQ(dgate_up[static_cast<size_t>((2 * r + 1) * cols + j)], dup[static_cast<size_t>(r * cols + j)]);
    }
  }
}

}  // namespace
}  // namespace spillway::ops

#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "base/status.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::cast_vector;
using spillway::testing::dot;
using spillway::testing::numeric_gradient;
using spillway::testing::random_vector;
using spillway::testing::rel_error;

// Each value rounded to float, so the float kernel and the double reference
// read the same inputs.
std::vector<double> as_float_values(const std::vector<double>& v) {
  auto rounded = cast_vector<float>(v);
  return {rounded.begin(), rounded.end()};
}

// C = alpha * op(A) op(B) + beta * C, one element at a time in double.
std::vector<double> reference_matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                     double alpha, const std::vector<double>& a,
                                     const std::vector<double>& b, double beta,
                                     const std::vector<double>& c) {
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = trans_a ? a[p * m + i] : a[i * k + p];
        double bv = trans_b ? b[j * k + p] : b[p * n + j];
        sum += av * bv;
      }
      out[i * n + j] = alpha * sum + (beta == 0 ? 0 : beta * c[i * n + j]);
    }
  }
  return out;
}

struct Dims {
  int64_t m, n, k;
};

// The last shape is large enough for OpenBLAS's blocked path, past its
// small-matrix kernels.
const Dims kShapes[] = {{1, 1, 1},   {7, 5, 33},   {33, 129, 64},
                        {64, 1, 129}, {5, 64, 7},  {129, 33, 5}, {257, 130, 300}};

TEST(Matmul, FloatMatchesReferenceForEveryTranspose) {
  uint64_t seed = 1;
  for (const Dims& d : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      // Inputs are rounded to float first so the reference sees the same values.
      auto a = as_float_values(random_vector(d.m * d.k, seed++));
      auto b = as_float_values(random_vector(d.k * d.n, seed++));
      std::vector<float> c(static_cast<size_t>(d.m * d.n), std::numeric_limits<float>::quiet_NaN());
      auto af = cast_vector<float>(a), bf = cast_vector<float>(b);
      matmul<float>(ta, tb, d.m, d.n, d.k, 1.0f, af.data(), bf.data(), 0.0f, c.data());
      auto want = reference_matmul(ta, tb, d.m, d.n, d.k, 1.0, a, b, 0.0, {});
      EXPECT_LE(rel_error(c, want), 1e-5) << "m=" << d.m << " n=" << d.n << " k=" << d.k
                                          << " trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

TEST(Matmul, AlphaAndBetaScale) {
  uint64_t seed = 100;
  for (const Dims& d : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      auto a = as_float_values(random_vector(d.m * d.k, seed++));
      auto b = as_float_values(random_vector(d.k * d.n, seed++));
      auto c0 = as_float_values(random_vector(d.m * d.n, seed++));
      auto af = cast_vector<float>(a), bf = cast_vector<float>(b), c = cast_vector<float>(c0);
      matmul<float>(ta, tb, d.m, d.n, d.k, 0.5f, af.data(), bf.data(), -1.5f, c.data());
      auto want = reference_matmul(ta, tb, d.m, d.n, d.k, 0.5, a, b, -1.5, c0);
      EXPECT_LE(rel_error(c, want), 1e-5) << "m=" << d.m << " n=" << d.n << " k=" << d.k
                                          << " trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

// beta = 1 is how a parameter's gradient accumulates into the caller's
// buffer: C == old C + op(A) op(B), for every transpose the backward uses.
TEST(Matmul, BetaOneAccumulatesIntoC) {
  uint64_t seed = 200;
  for (const Dims& d : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      auto af = cast_vector<float>(random_vector(d.m * d.k, seed++));
      auto bf = cast_vector<float>(random_vector(d.k * d.n, seed++));
      const auto old = cast_vector<float>(random_vector(d.m * d.n, seed++, -3.0, 3.0));
      std::vector<float> fresh(old.size(), std::numeric_limits<float>::quiet_NaN());
      matmul<float>(ta, tb, d.m, d.n, d.k, 1.0f, af.data(), bf.data(), 0.0f, fresh.data());
      auto acc = old;
      matmul<float>(ta, tb, d.m, d.n, d.k, 1.0f, af.data(), bf.data(), 1.0f, acc.data());
      std::vector<double> want(old.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(old[i]) + fresh[i];
      EXPECT_LE(rel_error(acc, want), 1e-6) << "m=" << d.m << " n=" << d.n << " k=" << d.k
                                            << " trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

TEST(Matmul, EmptyInnerDimensionScalesC) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  matmul<float>(false, false, 2, 3, 0, 1.0f, nullptr, nullptr, 2.0f, c.data());
  EXPECT_EQ(c, (std::vector<float>{2, 4, 6, 8, 10, 12}));
  std::vector<float> garbage(6, nan);
  matmul<float>(true, true, 2, 3, 0, 1.0f, nullptr, nullptr, 0.0f, garbage.data());
  EXPECT_EQ(garbage, std::vector<float>(6, 0.0f));
  // m or n == 0: nothing to write, and no pointer is touched.
  matmul<float>(false, false, 0, 3, 4, 1.0f, nullptr, nullptr, 0.0f, nullptr);
  matmul<double>(false, false, 3, 0, 4, 1.0, nullptr, nullptr, 0.0, nullptr);
}

// Y = op(A) op(B); for each transpose case, the header's dA and dB written as
// matmul calls on the stored layouts.
void backward(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, const double* b,
              const double* dy, double* da, double* db) {
  if (!ta && !tb) {
    matmul<double>(false, true, m, k, n, 1.0, dy, b, 0.0, da);  // dA = dY B^T
    matmul<double>(true, false, k, n, m, 1.0, a, dy, 0.0, db);  // dB = A^T dY
  } else if (!ta && tb) {
    matmul<double>(false, false, m, k, n, 1.0, dy, b, 0.0, da);  // dA = dY B
    matmul<double>(true, false, n, k, m, 1.0, dy, a, 0.0, db);   // dB = dY^T A
  } else if (ta && !tb) {
    matmul<double>(false, true, k, m, n, 1.0, b, dy, 0.0, da);   // dA = B dY^T
    matmul<double>(false, false, k, n, m, 1.0, a, dy, 0.0, db);  // dB = A dY
  } else {
    matmul<double>(true, true, k, m, n, 1.0, b, dy, 0.0, da);  // dA = B^T dY^T
    matmul<double>(true, true, n, k, m, 1.0, dy, a, 0.0, db);  // dB = dY^T A^T
  }
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  const Dims shapes[] = {{3, 4, 5}, {7, 2, 3}, {1, 6, 1}};
  uint64_t seed = 200;
  for (const Dims& d : shapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      auto a = random_vector(d.m * d.k, seed++);
      auto b = random_vector(d.k * d.n, seed++);
      auto upstream = random_vector(d.m * d.n, seed++);
      std::vector<double> y(static_cast<size_t>(d.m * d.n));
      auto loss = [&] {
        matmul<double>(ta, tb, d.m, d.n, d.k, 1.0, a.data(), b.data(), 0.0, y.data());
        return dot(y, upstream);
      };
      auto want_da = numeric_gradient(a, loss);
      auto want_db = numeric_gradient(b, loss);
      std::vector<double> da(a.size()), db(b.size());
      backward(ta, tb, d.m, d.n, d.k, a.data(), b.data(), upstream.data(), da.data(), db.data());
      EXPECT_LE(rel_error(da, want_da), 1e-6) << "trans_a=" << ta << " trans_b=" << tb;
      EXPECT_LE(rel_error(db, want_db), 1e-6) << "trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

TEST(Matmul, RejectsNegativeSizes) {
  EXPECT_THROW(matmul<float>(false, false, -1, 2, 2, 1.0f, nullptr, nullptr, 0.0f, nullptr), Error);
}

}  // namespace
}  // namespace spillway::ops

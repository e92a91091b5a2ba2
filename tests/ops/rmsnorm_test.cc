#include "ops/rmsnorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/add.h"
#include "testing/numeric.h"
#include "testing/threads.h"

namespace spillway::ops {
namespace {

using spillway::testing::cast_vector;
using spillway::testing::dot;
using spillway::testing::numeric_gradient;
using spillway::testing::random_vector;
using spillway::testing::rel_error;

constexpr double kEps = 1e-5;

struct Reference {
  std::vector<double> y, rstd, dx, dweight;
};

// Forward and backward straight from the definitions, in double.
Reference reference(const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& dy, int64_t rows, int64_t dim) {
  Reference ref;
  ref.dweight.assign(static_cast<size_t>(dim), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < dim; ++j) ms += x[r * dim + j] * x[r * dim + j] / dim;
    const double rstd = 1.0 / std::sqrt(ms + kEps);
    ref.rstd.push_back(rstd);
    double mean = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const double xhat = x[r * dim + j] * rstd;
      ref.y.push_back(xhat * w[j]);
      ref.dweight[j] += dy[r * dim + j] * xhat;
      mean += dy[r * dim + j] * w[j] * xhat / dim;
    }
    for (int64_t j = 0; j < dim; ++j) {
      const double xhat = x[r * dim + j] * rstd;
      ref.dx.push_back(rstd * (dy[r * dim + j] * w[j] - xhat * mean));
    }
  }
  return ref;
}

// Each value rounded to float, so the float kernel and the double reference
// read the same inputs.
std::vector<double> as_float_values(const std::vector<double>& v) {
  auto rounded = cast_vector<float>(v);
  return {rounded.begin(), rounded.end()};
}

TEST(RMSNorm, FloatMatchesReference) {
  uint64_t seed = 1;
  for (int64_t rows : {1, 7, 33}) {
    for (int64_t dim : {1, 5, 64, 129}) {
      auto x = as_float_values(random_vector(rows * dim, seed++));
      auto w = as_float_values(random_vector(dim, seed++, 0.5, 1.5));
      auto dy = as_float_values(random_vector(rows * dim, seed++));
      auto xf = cast_vector<float>(x), wf = cast_vector<float>(w), dyf = cast_vector<float>(dy);
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> y(x.size(), nan), rstd(rows, nan), dx(x.size(), nan), dw(dim, nan);
      rmsnorm_forward<float>(xf.data(), wf.data(), y.data(), rstd.data(), rows, dim, kEps);
      rmsnorm_backward<float>(dyf.data(), xf.data(), wf.data(), rstd.data(), dx.data(), dw.data(),
                              rows, dim);
      Reference ref = reference(x, w, dy, rows, dim);
      EXPECT_LE(rel_error(y, ref.y), 1e-5) << "rows=" << rows << " dim=" << dim;
      EXPECT_LE(rel_error(rstd, ref.rstd), 1e-5) << "rows=" << rows << " dim=" << dim;
      if (dim > 1) {
        EXPECT_LE(rel_error(dx, ref.dx), 1e-5) << "rows=" << rows << " dim=" << dim;
      } else {
        // With one column dx = rstd * dy * w * eps / (x^2 + eps): its two terms
        // cancel to a few parts in 1e5, below float's resolution of the stored
        // rstd, so the error is measured against the size of the terms.
        double err = 0, scale = 0;
        for (int64_t r = 0; r < rows; ++r) {
          err += (dx[r] - ref.dx[r]) * (dx[r] - ref.dx[r]);
          scale += (ref.rstd[r] * dy[r] * w[0]) * (ref.rstd[r] * dy[r] * w[0]);
        }
        EXPECT_LE(std::sqrt(err / scale), 1e-5) << "rows=" << rows << " dim=1";
      }
      EXPECT_LE(rel_error(dw, ref.dweight), 1e-5) << "rows=" << rows << " dim=" << dim;
    }
  }
}

TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
  uint64_t seed = 100;
  for (const auto& shape : {std::pair<int64_t, int64_t>{3, 5}, {7, 17}, {1, 1}, {2, 64}}) {
    const int64_t rows = shape.first, dim = shape.second;  // lambdas capture variables, not bindings
    auto x = random_vector(rows * dim, seed++);
    auto w = random_vector(dim, seed++, 0.5, 1.5);
    auto upstream = random_vector(rows * dim, seed++);
    std::vector<double> y(x.size()), rstd(rows);
    auto loss = [&] {
      rmsnorm_forward<double>(x.data(), w.data(), y.data(), rstd.data(), rows, dim, kEps);
      return dot(y, upstream);
    };
    auto want_dx = numeric_gradient(x, loss);
    auto want_dw = numeric_gradient(w, loss);
    loss();  // rstd for the unperturbed x
    std::vector<double> dx(x.size()), dw(w.size());
    rmsnorm_backward<double>(upstream.data(), x.data(), w.data(), rstd.data(), dx.data(),
                             dw.data(), rows, dim);
    EXPECT_LE(rel_error(dx, want_dx), 1e-6) << "rows=" << rows << " dim=" << dim;
    EXPECT_LE(rel_error(dw, want_dw), 1e-6) << "rows=" << rows << " dim=" << dim;

    // A residual block's loss, rmsnorm(x) . upstream + x . skip: x's gradient
    // is the norm's dx plus skip, which the addend adds in the same pass.
    auto skip = random_vector(rows * dim, seed++);
    auto residual_loss = [&] { return loss() + dot(x, skip); };
    auto want_residual_dx = numeric_gradient(x, residual_loss);
    loss();
    std::vector<double> residual_dx(x.size()), residual_dw(w.size());
    rmsnorm_backward<double>(upstream.data(), x.data(), w.data(), rstd.data(), residual_dx.data(),
                             residual_dw.data(), rows, dim, false, skip.data());
    EXPECT_LE(rel_error(residual_dx, want_residual_dx), 1e-6) << "rows=" << rows << " dim=" << dim;
    EXPECT_EQ(residual_dw, dw) << "rows=" << rows << " dim=" << dim;
  }
}

// The addend gives what a separate add of dx and the addend gives (up to the
// one rounding of dx the fused sum skips), leaves dweight as it was, and
// works with dweight accumulating.
template <typename T>
void expect_addend_same_as_separate_add(double tolerance) {
  uint64_t seed = 500;
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {33, 129}, {1000, 64}}) {
    auto x = cast_vector<T>(random_vector(rows * dim, seed++));
    auto w = cast_vector<T>(random_vector(dim, seed++, 0.5, 1.5));
    auto dy = cast_vector<T>(random_vector(rows * dim, seed++));
    auto addend = cast_vector<T>(random_vector(rows * dim, seed++, -2.0, 2.0));
    std::vector<T> y(x.size()), rstd(static_cast<size_t>(rows));
    rmsnorm_forward<T>(x.data(), w.data(), y.data(), rstd.data(), rows, dim, kEps);
    std::vector<T> dx(x.size()), dw(w.size()), want(x.size());
    rmsnorm_backward<T>(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows, dim);
    add<T>(dx.data(), addend.data(), want.data(), rows * dim);

    const T nan = std::numeric_limits<T>::quiet_NaN();
    std::vector<T> got(x.size(), nan), got_dw(w.size(), nan);
    rmsnorm_backward<T>(dy.data(), x.data(), w.data(), rstd.data(), got.data(), got_dw.data(), rows, dim,
                        false, addend.data());
    const std::string where = "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim);
    EXPECT_LE(rel_error(got, std::vector<double>(want.begin(), want.end())), tolerance) << where;
    EXPECT_EQ(got_dw, dw) << where;

    auto acc = cast_vector<T>(random_vector(dim, seed++, -3.0, 3.0));
    const auto old = acc;
    std::fill(got.begin(), got.end(), nan);
    rmsnorm_backward<T>(dy.data(), x.data(), w.data(), rstd.data(), got.data(), acc.data(), rows, dim,
                        /*accumulate_dweight=*/true, addend.data());
    EXPECT_LE(rel_error(got, std::vector<double>(want.begin(), want.end())), tolerance) << where;
    for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(acc[j], old[j] + dw[j]) << where << " j=" << j;
  }
}

TEST(RMSNorm, BackwardAddsTheAddendToDx) {
  expect_addend_same_as_separate_add<float>(1e-6);
  expect_addend_same_as_separate_add<double>(1e-14);
}

// Accumulating adds the same rounded dweight to what the buffer held, so the
// result is old + result exactly; dx is overwritten as before.
TEST(RMSNorm, BackwardAccumulatesDweightIntoTheBuffer) {
  uint64_t seed = 300;
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{3, 5}, {1000, 257}, {0, 4}}) {
    auto x = cast_vector<float>(random_vector(rows * dim, seed++));
    auto w = cast_vector<float>(random_vector(dim, seed++, 0.5, 1.5));
    auto dy = cast_vector<float>(random_vector(rows * dim, seed++));
    std::vector<float> y(x.size()), rstd(static_cast<size_t>(rows));
    rmsnorm_forward<float>(x.data(), w.data(), y.data(), rstd.data(), rows, dim, kEps);
    std::vector<float> dx(x.size()), dw(w.size(), std::numeric_limits<float>::quiet_NaN());
    rmsnorm_backward<float>(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows, dim);

    const auto old = cast_vector<float>(random_vector(dim, seed++, -3.0, 3.0));
    auto acc = old;
    std::vector<float> dx_acc(x.size(), std::numeric_limits<float>::quiet_NaN());
    rmsnorm_backward<float>(dy.data(), x.data(), w.data(), rstd.data(), dx_acc.data(), acc.data(), rows, dim,
                            /*accumulate_dweight=*/true);
    EXPECT_EQ(dx_acc, dx) << "rows=" << rows << " dim=" << dim;
    for (int64_t j = 0; j < dim; ++j) {
      EXPECT_EQ(acc[j], old[j] + dw[j]) << "rows=" << rows << " dim=" << dim << " j=" << j;
    }
  }
}

// The double kernel shows any change in the order of dweight's sum in its low
// bits; the float one sums in double and rounds, which hides most of them.
template <typename T>
void expect_backward_independent_of_threads() {
  const int64_t rows = 1000, dim = 257;
  auto x = cast_vector<T>(random_vector(rows * dim, 11));
  auto w = cast_vector<T>(random_vector(dim, 12, 0.5, 1.5));
  auto dy = cast_vector<T>(random_vector(rows * dim, 13));
  std::vector<T> y(x.size()), rstd(rows);
  rmsnorm_forward<T>(x.data(), w.data(), y.data(), rstd.data(), rows, dim, kEps);
  testing::expect_same_bits_with_1_and_4_threads([&] {
    std::vector<T> grads(x.size() + w.size());  // dx, then dweight
    rmsnorm_backward<T>(dy.data(), x.data(), w.data(), rstd.data(), grads.data(),
                        grads.data() + x.size(), rows, dim);
    return grads;
  });
}

TEST(RMSNorm, BackwardDoesNotDependOnThreadCount) {
  expect_backward_independent_of_threads<float>();
  expect_backward_independent_of_threads<double>();
}

}  // namespace
}  // namespace spillway::ops

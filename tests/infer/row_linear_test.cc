// The batch-invariant matmul: equal to a float64 reference to float32
// rounding, and each row the same bits whatever rows come with it.
#include "infer/row_linear.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "testing/numeric.h"

namespace spillway::infer {
namespace {

std::vector<float> randoms(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(RowLinear, MatchesAFloat64Reference) {
  for (const int64_t in : {1, 15, 16, 17, 100, 257}) {
    const int64_t rows = 5, out = 7;
    const std::vector<float> x = randoms(static_cast<size_t>(rows * in), 1),
                             w = randoms(static_cast<size_t>(out * in), 2);
    std::vector<float> y(static_cast<size_t>(rows * out));
    linear_rows(x.data(), w.data(), y.data(), rows, in, out);
    std::vector<double> want(y.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i)
          s += double(x[static_cast<size_t>(r * in + i)]) * w[static_cast<size_t>(o * in + i)];
        want[static_cast<size_t>(r * out + o)] = s;
      }
    }
    EXPECT_LT(testing::rel_error(y, want), 1e-5) << "in = " << in;
  }
}

TEST(RowLinear, ARowIsTheSameBitsInAnyBatch) {
  const int64_t in = 300, out = 33;
  const std::vector<float> x = randoms(static_cast<size_t>(64 * in), 3), w = randoms(static_cast<size_t>(out * in), 4);
  std::vector<float> batch(static_cast<size_t>(64 * out)), one(static_cast<size_t>(out));
  linear_rows(x.data(), w.data(), batch.data(), 64, in, out);
  for (const int64_t r : {0, 17, 63}) {
    linear_rows(x.data() + r * in, w.data(), one.data(), 1, in, out);
    EXPECT_EQ(one, std::vector<float>(batch.begin() + r * out, batch.begin() + (r + 1) * out)) << "row " << r;
  }
}

}  // namespace
}  // namespace spillway::infer

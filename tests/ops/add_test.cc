#include "ops/add.h"

#include <gtest/gtest.h>

#include <vector>

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

// Sizes past the kernel's threshold for threads are included.
const int64_t kSizes[] = {1, 5, 64, 129, 100003};

TEST(Add, FloatMatchesReference) {
  uint64_t seed = 1;
  for (int64_t n : kSizes) {
    auto a = as_float_values(random_vector(n, seed++));
    auto b = as_float_values(random_vector(n, seed++));
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    auto af = cast_vector<float>(a), bf = cast_vector<float>(b);
    std::vector<float> out(n);
    add<float>(af.data(), bf.data(), out.data(), n);
    EXPECT_LE(rel_error(out, want), 1e-5) << "n=" << n;

    // The residual stream adds in place: out aliases a, then b.
    auto in_a = af;
    add<float>(in_a.data(), bf.data(), in_a.data(), n);
    EXPECT_EQ(in_a, out) << "n=" << n;
    auto in_b = bf;
    add<float>(af.data(), in_b.data(), in_b.data(), n);
    EXPECT_EQ(in_b, out) << "n=" << n;
  }
}

// out += a + b: the sum rounded first, then added, so exactly old + (a + b).
TEST(Add, AccumulatingAddAddsTheSumToOut) {
  uint64_t seed = 20;
  for (int64_t n : kSizes) {
    auto a = cast_vector<float>(random_vector(n, seed++));
    auto b = cast_vector<float>(random_vector(n, seed++));
    const auto old = cast_vector<float>(random_vector(n, seed++, -5.0, 5.0));
    auto out = old;
    add<float>(a.data(), b.data(), out.data(), n, /*accumulate=*/true);
    for (int64_t i = 0; i < n; ++i) {
      const float sum = a[i] + b[i];
      ASSERT_EQ(out[i], old[i] + sum) << "n=" << n << " i=" << i;
    }
    std::vector<double> out_d(old.begin(), old.end()), ad(a.begin(), a.end()), bd(b.begin(), b.end());
    add<double>(ad.data(), bd.data(), out_d.data(), n, true);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out_d[i], static_cast<double>(old[i]) + (ad[i] + bd[i]));
  }
}

TEST(Add, AccumulateMatchesReference) {
  uint64_t seed = 50;
  for (int64_t n : kSizes) {
    auto dst = as_float_values(random_vector(n, seed++));
    auto src1 = as_float_values(random_vector(n, seed++));
    auto src2 = as_float_values(random_vector(n, seed++));
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = dst[i] + src1[i] + src2[i];
    auto got = cast_vector<float>(dst);
    auto s1 = cast_vector<float>(src1), s2 = cast_vector<float>(src2);
    accumulate<float>(got.data(), s1.data(), n);
    accumulate<float>(got.data(), s2.data(), n);
    EXPECT_LE(rel_error(got, want), 1e-5) << "n=" << n;

    std::vector<double> got_d = dst;
    accumulate<double>(got_d.data(), src1.data(), n);
    accumulate<double>(got_d.data(), src2.data(), n);
    EXPECT_LE(rel_error(got_d, want), 1e-15) << "n=" << n;
  }
}

}  // namespace
}  // namespace spillway::ops

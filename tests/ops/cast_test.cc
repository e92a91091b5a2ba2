#include "ops/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::random_vector;
using spillway::testing::rel_error;

template <typename Dst, typename Src>
std::vector<Dst> cast_all(const std::vector<Src>& src) {
  std::vector<Dst> dst(src.size());
  cast(src.data(), dtype_of<Src>(), dst.data(), dtype_of<Dst>(), static_cast<int64_t>(src.size()));
  return dst;
}

template <typename H>
std::vector<uint16_t> bits_of(const std::vector<H>& v) {
  std::vector<uint16_t> out;
  for (const H& h : v) out.push_back(h.bits);
  return out;
}

template <typename H>
std::vector<H> every_pattern() {
  std::vector<H> all;
  for (uint32_t b = 0; b < 0x10000u; ++b) all.push_back(H{static_cast<uint16_t>(b)});
  return all;
}

template <typename H>
bool is_nan(H h) {
  return std::isnan(to_float(h));
}

// The 16-bit pattern whose value is nearest to x, ties to the even pattern,
// found by bisection over the patterns: independent of the kernel's rounding.
// Only for finite x that does not round past the type's largest value.
template <typename H>
uint16_t nearest(double x) {
  auto value = [](uint32_t bits) {
    return static_cast<double>(to_float(H{static_cast<uint16_t>(bits)}));
  };
  // For non-negative patterns the value grows with the pattern: find the
  // largest one at or below |x|.
  const double mag = std::fabs(x);
  uint32_t lo = 0, hi = std::is_same_v<H, bf16> ? 0x7f80u : 0x7c00u;  // +inf
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    (value(mid) <= mag ? lo : hi) = mid;
  }
  const double below = mag - value(lo), above = value(hi) - mag;
  uint32_t pick = below < above ? lo : above < below ? hi : ((lo & 1u) ? hi : lo);
  return static_cast<uint16_t>(pick | (x < 0 ? 0x8000u : 0u));
}

TEST(Cast, RoundsSpecificValuesToNearestEven) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie (goes down to even 1),
  // 1 + 3 * 2^-8 is a tie between odd 0x3f81 and even 0x3f82.
  std::vector<float> f = {1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 1.0f + 1.0f / 128};
  EXPECT_EQ(bits_of(cast_all<bf16>(f)), (std::vector<uint16_t>{0x3f80, 0x3f80, 0x3f82, 0xc020, 0x3f81}));
  // f16 keeps 11: 1 + 2^-11 ties to 1, 1 + 3 * 2^-11 to 1 + 2^-9; 65504 is the
  // largest half and 65520 rounds past it; 2^-24 is the smallest subnormal.
  std::vector<float> h = {1.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65520.0f,
                          std::ldexp(1.0f, -24), -0.0f};
  EXPECT_EQ(bits_of(cast_all<f16>(h)),
            (std::vector<uint16_t>{0x3c00, 0x3c00, 0x3c02, 0x7bff, 0x7c00, 0x0001, 0x8000}));
}

TEST(Cast, DoubleNarrowsWithOneRounding) {
  // Through f32 these would first round to the exact tie and then to even,
  // one step below the nearest value.
  std::vector<double> d_bf = {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30),
                              -(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30))};
  EXPECT_EQ(bits_of(cast_all<bf16>(d_bf)), (std::vector<uint16_t>{0x3f81, 0xbf81}));
  std::vector<double> d_h = {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)};
  EXPECT_EQ(bits_of(cast_all<f16>(d_h)), (std::vector<uint16_t>{0x3c01}));
}

TEST(Cast, DoubleToHalfMatchesNearestSearch) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> bf_exp(-130, 126), h_exp(-26, 14);  // short of overflow
  std::vector<double> for_bf, for_h;
  for (int i = 0; i < 4000; ++i) {
    double sign = (i & 1) ? -1.0 : 1.0;
    for_bf.push_back(sign * std::ldexp(mantissa(rng), bf_exp(rng)));
    for_h.push_back(sign * std::ldexp(mantissa(rng), h_exp(rng)));
  }
  // Values a hair off exact ties, where rounding twice goes wrong.
  for (int i = 0; i < 200; ++i) {
    const int scale = i % 20 - 10;
    const double tie_bf = std::ldexp(1.0 + (2 * (i % 64) + 1) * std::ldexp(1.0, -8), scale);
    const double tie_h = std::ldexp(1.0 + (2 * i + 1) * std::ldexp(1.0, -11), scale);
    for_bf.insert(for_bf.end(), {tie_bf, tie_bf + std::ldexp(tie_bf, -45), tie_bf - std::ldexp(tie_bf, -45)});
    for_h.insert(for_h.end(), {tie_h, tie_h + std::ldexp(tie_h, -45), tie_h - std::ldexp(tie_h, -45)});
  }
  auto got_bf = bits_of(cast_all<bf16>(for_bf));
  auto got_h = bits_of(cast_all<f16>(for_h));
  for (size_t i = 0; i < for_bf.size(); ++i) {
    ASSERT_EQ(got_bf[i], nearest<bf16>(for_bf[i])) << "bf16 of " << for_bf[i];
  }
  for (size_t i = 0; i < for_h.size(); ++i) {
    ASSERT_EQ(got_h[i], nearest<f16>(for_h[i])) << "f16 of " << for_h[i];
  }
}

template <typename H>
void expect_round_trips() {
  auto all = every_pattern<H>();
  auto back32 = cast_all<H>(cast_all<float>(all));
  auto back64 = cast_all<H>(cast_all<double>(all));
  for (size_t i = 0; i < all.size(); ++i) {
    if (is_nan(all[i])) {
      EXPECT_TRUE(is_nan(back32[i]) && is_nan(back64[i])) << std::hex << all[i].bits;
    } else {
      EXPECT_EQ(back32[i].bits, all[i].bits);
      EXPECT_EQ(back64[i].bits, all[i].bits);
    }
  }
}

TEST(Cast, HalfTypesRoundTripThroughWiderTypes) {
  expect_round_trips<bf16>();
  expect_round_trips<f16>();
}

TEST(Cast, HalfToHalfRoundsOnce) {
  // Every f16 value is exact in f32, so f16 -> bf16 must equal f32 -> bf16.
  auto all = every_pattern<f16>();
  auto direct = bits_of(cast_all<bf16>(all));
  auto via = bits_of(cast_all<bf16>(cast_all<float>(all)));
  EXPECT_EQ(direct, via);
  auto all_bf = every_pattern<bf16>();
  EXPECT_EQ(bits_of(cast_all<f16>(all_bf)), bits_of(cast_all<f16>(cast_all<float>(all_bf))));
}

TEST(Cast, FloatAndDoubleAgreeWithReference) {
  for (int64_t n : {1, 5, 64, 129, 100003}) {
    auto d = random_vector(n, static_cast<uint64_t>(n), -1e3, 1e3);
    auto f = cast_all<float>(d);
    EXPECT_LE(rel_error(f, d), 1e-7) << "n=" << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(f[i], static_cast<float>(d[i]));
    auto widened = cast_all<double>(f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(widened[i], static_cast<double>(f[i]));
    auto same = cast_all<float>(f);
    EXPECT_EQ(same, f);
    // bf16 keeps 8 significant bits: relative error at most 2^-9 per element.
    auto bf = cast_all<float>(cast_all<bf16>(f));
    EXPECT_LE(rel_error(bf, d), std::ldexp(1.0, -9)) << "n=" << n;
  }
}

TEST(Cast, KeepsNaNAndInfinity) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> d = {nan, -nan, inf, -inf};
  auto check = [](auto values) {
    EXPECT_TRUE(std::isnan(static_cast<double>(values[0])) && std::isnan(static_cast<double>(values[1])));
    EXPECT_EQ(static_cast<double>(values[2]), std::numeric_limits<double>::infinity());
    EXPECT_EQ(static_cast<double>(values[3]), -std::numeric_limits<double>::infinity());
  };
  check(cast_all<float>(d));
  check(cast_all<double>(cast_all<bf16>(d)));
  check(cast_all<double>(cast_all<f16>(d)));
  check(cast_all<float>(cast_all<f16>(cast_all<bf16>(d))));
}

TEST(Cast, RejectsNonFloatTypesNamingBoth) {
  std::vector<int32_t> ints = {1, 2};
  std::vector<float> floats(2);
  try {
    cast(ints.data(), DType::i32, floats.data(), DType::f32, 2);
    ADD_FAILURE() << "no error for i32 -> f32";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_EQ(e.thing(), "cast");
    EXPECT_NE(message.find("i32"), std::string::npos) << message;
    EXPECT_NE(message.find("f32"), std::string::npos) << message;
  }
  try {
    cast(floats.data(), DType::bf16, ints.data(), DType::u16, 2);
    ADD_FAILURE() << "no error for bf16 -> u16";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("bf16"), std::string::npos) << message;
    EXPECT_NE(message.find("u16"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace spillway::ops

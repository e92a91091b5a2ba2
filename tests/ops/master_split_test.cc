// The split of an fp32 master into its bf16 working copy and a 16-bit
// remainder: every non-NaN pattern joins back exactly (a stride through all
// 2^32 patterns, and every dropped half around the rounding point), the
// working copy is nearest-even rounding except on ties, where it goes away
// from zero, and NaNs stay NaNs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/dtype.h"
#include "ops/master_split.h"

namespace spillway::ops {
namespace {

bool is_nan_bits(uint32_t x) { return (x & 0x7fffffffu) > 0x7f800000u; }

TEST(MasterSplit, EveryNonNanPatternJoinsBackExactly) {
  uint64_t checked = 0;
  // An odd stride visits patterns of every exponent, sign and low half.
  for (uint64_t x = 0; x < (uint64_t{1} << 32); x += 9973) {
    const auto bits = static_cast<uint32_t>(x);
    if (is_nan_bits(bits)) continue;
    const MasterHalves h = split_master_bits(bits);
    ASSERT_EQ(join_master_bits(h.working, h.remainder), bits) << std::hex << bits;
    ++checked;
  }
  EXPECT_GT(checked, 400000u);
}

// Around the rounding point of a few high halves (even and odd, both signs,
// the largest finite, the smallest subnormal): every low half.
TEST(MasterSplit, RoundsToNearestWithTiesAwayFromZero) {
  for (uint32_t high : {0x3f80u, 0x3f81u, 0xbf80u, 0xbf81u, 0x7f7fu, 0xff7fu, 0x0000u, 0x8000u, 0x0001u}) {
    for (uint32_t low = 0; low < 0x10000u; ++low) {
      const uint32_t bits = (high << 16) | low;
      const MasterHalves h = split_master_bits(bits);
      ASSERT_EQ(join_master_bits(h.working, h.remainder), bits) << std::hex << bits;
      const uint16_t nearest_even = to_bf16(bits_float(bits)).bits;
      if (low == 0x8000u) {
        ASSERT_EQ(h.working, high + 1) << "a tie goes away from zero: " << std::hex << bits;
      } else {
        ASSERT_EQ(h.working, nearest_even) << std::hex << bits;
      }
    }
  }
}

TEST(MasterSplit, InfinitiesStayAndNansStayNans) {
  for (float f : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()}) {
    const MasterHalves h = split_master_bits(float_bits(f));
    EXPECT_EQ(bits_float(join_master_bits(h.working, h.remainder)), f);
  }
  // The largest finite float rounds up to infinity, as nearest-even does.
  EXPECT_EQ(split_master_bits(float_bits(std::numeric_limits<float>::max())).working, 0x7f80u);
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0xff80ffffu}) {
    const MasterHalves h = split_master_bits(nan);
    EXPECT_TRUE(std::isnan(to_float(bf16{h.working}))) << std::hex << nan;
    EXPECT_EQ(h.working >> 15, nan >> 31) << "sign of " << std::hex << nan;
    EXPECT_TRUE(std::isnan(bits_float(join_master_bits(h.working, h.remainder)))) << std::hex << nan;
  }
}

TEST(MasterSplit, ArraysSplitAndJoinElementwise) {
  std::vector<float> master;
  for (int i = 0; i < 100003; ++i) master.push_back(std::ldexp(std::sin(i * 0.37f), (i % 60) - 30));
  master[5] = bits_float(0x3f808000u);  // a tie
  master[6] = -0.0f;
  std::vector<bf16> working(master.size());
  std::vector<uint16_t> remainder(master.size());
  split_master(master.data(), working.data(), remainder.data(), static_cast<int64_t>(master.size()));
  std::vector<float> joined(master.size());
  join_master(working.data(), remainder.data(), joined.data(), static_cast<int64_t>(master.size()));
  for (size_t i = 0; i < master.size(); ++i) {
    ASSERT_EQ(float_bits(joined[i]), float_bits(master[i])) << i;
    ASSERT_EQ(working[i].bits, split_master_bits(float_bits(master[i])).working) << i;
  }
  EXPECT_EQ(working[5].bits, 0x3f81u);
  EXPECT_EQ(working[6].bits, 0x8000u);
}

}  // namespace
}  // namespace spillway::ops

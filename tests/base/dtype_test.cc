#include "base/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/status.h"

namespace spillway {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_name(DType::u32), "u32");
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  try {
    parse_dtype("f8", "config.torch_dtype");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.torch_dtype: unknown dtype 'f8'"), std::string::npos);
  }
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(to_bf16(1.0f + 1.0f / 256).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(to_bf16(1.0f + 3.0f / 256).bits, 0x3f82);
  EXPECT_EQ(to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536).bits, 0x3f81);
  EXPECT_EQ(to_float(to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isinf(to_float(to_bf16(std::numeric_limits<float>::max()))));
}

TEST(BF16, KeepsNaN) {
  // A NaN whose payload lives only in the low 16 bits would truncate to inf.
  float nan_low = bits_float(0x7f800001u);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(nan_low))));
  EXPECT_TRUE(std::isnan(to_float(to_bf16(-std::numeric_limits<float>::quiet_NaN()))));
}

TEST(F16, RoundTripsEveryHalf) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    f16 h{static_cast<uint16_t>(bits)};
    float f = to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(to_float(to_f16(f))));
      continue;
    }
    ASSERT_EQ(to_f16(f).bits, h.bits) << "bits " << bits;
  }
}

TEST(F16, RoundsToNearestEven) {
  EXPECT_EQ(to_f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(to_f16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(to_f16(65520.0f).bits, 0x7c00);  // halfway to 2^16 rounds to infinity
  EXPECT_EQ(to_f16(65519.0f).bits, 0x7bff);
  // Halfway between the two smallest subnormals (1 and 2 times 2^-24): to even (2).
  EXPECT_EQ(to_f16(1.5f * 5.9604644775390625e-08f).bits, 0x0002);
  EXPECT_EQ(to_f16(0.5f * 5.9604644775390625e-08f).bits, 0x0000);
  EXPECT_EQ(to_f16(1.0f + 1.0f / 2048).bits, 0x3c00);        // tie to even
  EXPECT_EQ(to_f16(1.0f + 3.0f / 2048).bits, 0x3c02);
  EXPECT_EQ(to_f16(-0.0f).bits, 0x8000);
}

}  // namespace
}  // namespace spillway

// GPU casts against the CPU cast, bit for bit: f32 -> bf16 on random values
// and on the cases rounding gets wrong (ties, NaN payloads, infinities,
// subnormals), every bf16 pattern widened, copies, and refused dtypes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/cast.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::DeviceArray;
using spillway::testing::random_bf16;
using spillway::testing::bits_of;

using spillway::testing::random_vector;

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(float_bits(f));
  return out;
}

// Random floats of every magnitude plus the hard cases, n of them.
std::vector<float> tricky_floats(int64_t n, uint64_t seed) {
  std::vector<float> v;
  const uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,  // zeros, infinities
      0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff812345u,  // quiet and signalling NaNs
      0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu,  // ties to even, just off ties
      0x00000001u, 0x00008000u, 0x80018000u, 0x007fffffu,  // subnormals
      0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,               // largest: rounds to infinity
  };
  for (uint32_t b : specials) {
    if (static_cast<int64_t>(v.size()) < n) v.push_back(bits_float(b));
  }
  const auto mantissas = random_vector(n, seed, 1.0, 2.0);
  const auto exponents = random_vector(n, seed + 1, -140.0, 128.0);
  for (size_t i = 0; static_cast<int64_t>(v.size()) < n; ++i) {
    const double x = std::ldexp(mantissas[i], static_cast<int>(exponents[i]));
    v.push_back(static_cast<float>(i % 2 ? -x : x));
  }
  return v;
}

const int64_t kSizes[] = {1, 7, 8, 129, 4097, 2048 * 16 + 5};

TEST(CastCuda, F32ToBf16MatchesCpuBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : kSizes) {
    for (int64_t offset : {0, 1, 3}) {
      const auto src = tricky_floats(n + offset, 10 + n);
      DeviceArray<float> dsrc(src);
      DeviceArray<bf16> ddst(static_cast<size_t>(n + offset));
      cast_cuda(dsrc.get() + offset, DType::f32, ddst.get() + offset, DType::bf16, n, nullptr);
      std::vector<bf16> want(static_cast<size_t>(n));
      cast(src.data() + offset, DType::f32, want.data(), DType::bf16, n);
      const auto got = ddst.download();
      EXPECT_EQ(bits_of(std::vector<bf16>(got.begin() + offset, got.end())), bits_of(want))
          << "n " << n << " offset " << offset;
    }
  }
}

TEST(CastCuda, Bf16ToF32MatchesCpuOnEveryPattern) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  std::vector<bf16> all;
  for (uint32_t b = 0; b < 0x10000u; ++b) all.push_back(bf16{static_cast<uint16_t>(b)});
  for (int64_t offset : {0, 1}) {
    const auto n = static_cast<int64_t>(all.size()) - offset;
    DeviceArray<bf16> dsrc(all);
    DeviceArray<float> ddst(static_cast<size_t>(n));
    cast_cuda(dsrc.get() + offset, DType::bf16, ddst.get(), DType::f32, n, nullptr);
    std::vector<float> want(static_cast<size_t>(n));
    cast(all.data() + offset, DType::bf16, want.data(), DType::f32, n);
    EXPECT_EQ(bits_of(ddst.download()), bits_of(want)) << "offset " << offset;
  }
}

TEST(CastCuda, SameTypeCopiesEveryBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto f = tricky_floats(1001, 5);
  DeviceArray<float> fsrc(f), fdst(f.size());
  cast_cuda(fsrc.get(), DType::f32, fdst.get(), DType::f32, 1001, nullptr);
  EXPECT_EQ(bits_of(fdst.download()), bits_of(f));
  cast_cuda(fsrc.get(), DType::f32, fsrc.get(), DType::f32, 1001, nullptr);  // src == dst
  EXPECT_EQ(bits_of(fsrc.download()), bits_of(f));

  const auto h = random_bf16(777, 6);
  DeviceArray<bf16> hsrc(h), hdst(h.size());
  cast_cuda(hsrc.get(), DType::bf16, hdst.get(), DType::bf16, 777, nullptr);
  EXPECT_EQ(bits_of(hdst.download()), bits_of(h));
}

TEST(CastCuda, RefusesOtherDtypes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  DeviceArray<float> buf(16);
  try {
    cast_cuda(buf.get(), DType::f32, buf.get(), DType::f16, 4, nullptr);
    FAIL() << "f32 -> f16 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cast_cuda(buf.get(), DType::i32, buf.get(), DType::f32, 4, nullptr), Error);
}

TEST(CastCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t n = 1 << 20;
  DeviceArray<float> src(tricky_floats(n, 9));
  DeviceArray<bf16> dst(static_cast<size_t>(n));
  cast_cuda(src.get(), DType::f32, dst.get(), DType::bf16, n, nullptr);
  const auto first = bits_of(dst.download());
  dst.poison();
  cast_cuda(src.get(), DType::f32, dst.get(), DType::bf16, n, nullptr);
  EXPECT_EQ(bits_of(dst.download()), first);
}

}  // namespace
}  // namespace spillway::ops

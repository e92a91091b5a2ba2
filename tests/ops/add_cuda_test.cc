// GPU add / accumulate against the CPU kernels on the same (bf16-rounded)
// inputs, at odd sizes, unaligned starts and LLaMA sizes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/add.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::DeviceArray;
using spillway::testing::random_bf16;
using spillway::testing::widen;
using spillway::testing::as_double;
using spillway::testing::bits_of;

using spillway::testing::random_vector;
using spillway::testing::rel_error;

// Sizes around the 8-wide vectors, a LLaMA-1B residual row block, and a
// start one element past a 16-byte boundary (the scalar head path).
const int64_t kSizes[] = {1, 7, 8, 129, 4097, 16 * 2048 + 3};

TEST(AddCuda, Bf16MatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : kSizes) {
    for (int64_t offset : {0, 1}) {
      const auto a = random_bf16(n + offset, 11 + n, -4, 4);
      const auto b = random_bf16(n + offset, 12 + n, -4, 4);
      DeviceArray<bf16> da(a), db(b), dout(static_cast<size_t>(n + offset));
      add_cuda(da.get() + offset, db.get() + offset, dout.get() + offset, n, nullptr);
      const auto got = dout.download();

      const auto fa = widen(a), fb = widen(b);
      std::vector<float> want(static_cast<size_t>(n));
      add(fa.data() + offset, fb.data() + offset, want.data(), n);
      const std::vector<bf16> got_n(got.begin() + offset, got.end());
      EXPECT_LT(rel_error(widen(got_n), as_double(want)), 1e-2)
          << "n " << n << " offset " << offset;
      if (offset == 1) {
        EXPECT_EQ(got[0].bits, 0xffff) << "wrote before the start, n " << n;
      }
    }
  }
}

TEST(AddCuda, Bf16InPlaceAndMisalignedOperands) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t n = 1000;
  const auto a = random_bf16(n + 1, 21), b = random_bf16(n + 1, 22);
  const auto fa = widen(a), fb = widen(b);

  // out == a.
  DeviceArray<bf16> da(a), db(b);
  add_cuda(da.get(), db.get(), da.get(), n + 1, nullptr);
  std::vector<float> want(static_cast<size_t>(n + 1));
  add(fa.data(), fb.data(), want.data(), n + 1);
  EXPECT_LT(rel_error(widen(da.download()), as_double(want)), 1e-2);

  // a one element past b's alignment: no common head exists, all scalar.
  DeviceArray<bf16> da2(a), db2(b), dout(static_cast<size_t>(n));
  add_cuda(da2.get() + 1, db2.get(), dout.get(), n, nullptr);
  std::vector<float> want2(static_cast<size_t>(n));
  add(fa.data() + 1, fb.data(), want2.data(), n);
  EXPECT_LT(rel_error(widen(dout.download()), as_double(want2)), 1e-2);
}

TEST(AddCuda, F32AddAndAccumulateMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : kSizes) {
    for (int64_t offset : {0, 1}) {
      const auto a = random_vector<float>(n + offset, 31 + n);
      const auto b = random_vector<float>(n + offset, 32 + n);
      DeviceArray<float> da(a), db(b), dout(static_cast<size_t>(n + offset));
      add_cuda(da.get() + offset, db.get() + offset, dout.get() + offset, n, nullptr);
      std::vector<float> want(a);
      add(a.data() + offset, b.data() + offset, want.data() + offset, n);
      auto got = dout.download();
      const std::vector<float> got_n(got.begin() + offset, got.end());
      const std::vector<float> want_n(want.begin() + offset, want.end());
      EXPECT_LT(rel_error(got_n, as_double(want_n)), 1e-5) << "n " << n;

      accumulate_cuda(da.get() + offset, db.get() + offset, n, nullptr);
      want = a;
      accumulate(want.data() + offset, b.data() + offset, n);
      got = da.download();
      EXPECT_LT(rel_error(got, as_double(want)), 1e-5) << "accumulate n " << n;
    }
  }
}

// The accumulating add (the last add of a tied parameter's gradient, into
// the caller's buffer) on outputs that hold known values: f32 gives
// old + (a + b) exactly as the CPU kernel does; bf16 rounds a + b, adds it to
// old and rounds again.
TEST(AddCuda, AccumulatingAddAddsTheSumToOut) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : kSizes) {
    for (int64_t offset : {0, 1}) {
      const auto a = random_vector<float>(n + offset, 51 + n);
      const auto b = random_vector<float>(n + offset, 52 + n);
      const auto old = random_vector<float>(n + offset, 53 + n, -3, 3);
      DeviceArray<float> da(a), db(b), dout(old);
      add_cuda(da.get() + offset, db.get() + offset, dout.get() + offset, n, nullptr, /*accumulate=*/true);
      auto want = old;
      add(a.data() + offset, b.data() + offset, want.data() + offset, n, /*accumulate=*/true);
      EXPECT_EQ(dout.download(), want) << "f32, n " << n << " offset " << offset;

      const auto ha = random_bf16(n + offset, 54 + n, -4, 4), hb = random_bf16(n + offset, 55 + n, -4, 4);
      const auto hold = random_bf16(n + offset, 56 + n, -4, 4);
      DeviceArray<bf16> dha(ha), dhb(hb), dhout(hold);
      add_cuda(dha.get() + offset, dhb.get() + offset, dhout.get() + offset, n, nullptr, /*accumulate=*/true);
      std::vector<bf16> hwant = hold;
      for (int64_t i = offset; i < n + offset; ++i) {
        const float sum = to_float(to_bf16(to_float(ha[i]) + to_float(hb[i])));
        hwant[i] = to_bf16(to_float(hold[i]) + sum);
      }
      EXPECT_EQ(bits_of(dhout.download()), bits_of(hwant)) << "bf16, n " << n << " offset " << offset;
    }
  }
}

TEST(AddCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t n = 2048 * 64 + 5;
  DeviceArray<bf16> da(random_bf16(n, 41)), db(random_bf16(n, 42)), dout(static_cast<size_t>(n));
  add_cuda(da.get(), db.get(), dout.get(), n, nullptr);
  const auto first = bits_of(dout.download());
  dout.poison();
  add_cuda(da.get(), db.get(), dout.get(), n, nullptr);
  EXPECT_EQ(bits_of(dout.download()), first);
}

}  // namespace
}  // namespace spillway::ops

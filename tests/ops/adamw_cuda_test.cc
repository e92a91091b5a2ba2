// GPU AdamW against the CPU kernel (fp32, to 1e-5) over several steps, with
// and without the bf16 copy, at odd sizes and unaligned starts; with bf16
// moments, bit for bit; with the master held split (ops/master_split.h), bit
// for bit the whole master's update.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/adamw.h"
#include "ops/master_split.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::DeviceArray;
using spillway::testing::as_double;

using spillway::testing::random_vector;
using spillway::testing::rel_error;

template <typename T>
std::vector<T> tail_from(const std::vector<T>& v, int64_t offset) {
  return {v.begin() + offset, v.end()};
}

std::vector<uint32_t> float_bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(float_bits(f));
  return out;
}

// The bf16 working copy of a master: ties away from zero (ops/master_split.h).
uint16_t working_bits(float master) { return split_master_bits(float_bits(master)).working; }

const int64_t kSizes[] = {1, 7, 8, 129, 4097, (1 << 20) + 3};

TEST(AdamWCuda, MatchesCpuOverSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  AdamWHyper hp;
  hp.lr = 1e-3;
  hp.weight_decay = 0.1;
  for (int64_t n : kSizes) {
    for (int64_t offset : {0, 1}) {
      for (bool with_copy : {true, false}) {
        auto param = random_vector<float>(n + offset, 1 + n);
        auto m = random_vector<float>(n + offset, 2 + n, -0.01, 0.01);
        auto v = random_vector<float>(n + offset, 3 + n, 0.0, 1e-4);
        DeviceArray<float> dparam(param), dm(m), dv(v);
        DeviceArray<bf16> dcopy(static_cast<size_t>(n + offset));
        for (int64_t step = 1; step <= 3; ++step) {
          hp.step = step;
          const auto grad = random_vector<float>(n + offset, 10 * step + n);
          DeviceArray<float> dgrad(grad);
          adamw_update_cuda(dparam.get() + offset, dgrad.get() + offset, dm.get() + offset,
                            dv.get() + offset, with_copy ? dcopy.get() + offset : nullptr, n, hp,
                            nullptr);
          adamw_update(param.data() + offset, grad.data() + offset, m.data() + offset,
                       v.data() + offset, n, hp);
        }
        const auto got_param = dparam.download();
        const char* what = with_copy ? " with the bf16 copy" : "";
        EXPECT_LT(rel_error(got_param, as_double(param)), 1e-5) << "param, n " << n << what;
        EXPECT_LT(rel_error(dm.download(), as_double(m)), 1e-5) << "m, n " << n << what;
        EXPECT_LT(rel_error(dv.download(), as_double(v)), 1e-5) << "v, n " << n << what;
        const auto copy = dcopy.download();
        for (int64_t i = 0; i < n + offset; ++i) {
          // The copy is the updated parameter rounded once; untouched (still
          // poison) without it, and before the start.
          const uint16_t want = with_copy && i >= offset ? working_bits(got_param[i]) : 0xffff;
          ASSERT_EQ(copy[i].bits, want) << "bf16 copy at " << i << ", n " << n << what;
        }
      }
    }
  }
}

// grad_scale (mean over micro-batches times the clipping factor) against the
// CPU kernel with the same scale, over steps whose scale changes.
TEST(AdamWCuda, GradScaleMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  AdamWHyper hp;
  hp.lr = 1e-3;
  hp.weight_decay = 0.1;
  for (int64_t n : {int64_t{7}, int64_t{4097}, int64_t{(1 << 20) + 3}}) {
    auto param = random_vector<float>(n, 61 + n);
    std::vector<float> m(static_cast<size_t>(n), 0.0f), v(static_cast<size_t>(n), 0.0f);
    DeviceArray<float> dparam(param), dm(m), dv(v);
    for (int64_t step = 1; step <= 3; ++step) {
      hp.step = step;
      hp.grad_scale = 0.25 * (0.9 / (1.5 + static_cast<double>(step)));
      const auto grad = random_vector<float>(n, 70 * step + n, -8, 8);  // a sum of micro-batches
      DeviceArray<float> dgrad(grad);
      adamw_update_cuda(dparam.get(), dgrad.get(), dm.get(), dv.get(), nullptr, n, hp, nullptr);
      adamw_update(param.data(), grad.data(), m.data(), v.data(), n, hp);
    }
    EXPECT_LT(rel_error(dparam.download(), as_double(param)), 1e-5) << "param, n " << n;
    EXPECT_LT(rel_error(dm.download(), as_double(m)), 1e-5) << "m, n " << n;
    EXPECT_LT(rel_error(dv.download(), as_double(v)), 1e-5) << "v, n " << n;
  }
}

// bf16 moments: bit for bit the CPU function (param, m, v and the bf16
// copy), at odd sizes, with the parameters and the moments aligned alike and
// not (moments 2 elements in: no head aligns them all, so every element takes
// the scalar path).
TEST(AdamWCuda, Bf16MomentsBitwiseEqualToCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  using spillway::testing::bits_of;
  using spillway::testing::random_bf16;
  AdamWHyper hp;
  hp.lr = 1e-3;
  hp.grad_scale = 0.3;
  const std::pair<int64_t, int64_t> offsets[] = {{0, 0}, {1, 1}, {0, 2}};
  for (int64_t n : kSizes) {
    for (auto [po, mo] : offsets) {
      for (bool with_copy : {true, false}) {
        hp.weight_decay = with_copy ? 0.1 : 0.0;
        auto param = random_vector<float>(n + po, 5 + n);
        auto m = random_bf16(n + mo, 6 + n, -0.01, 0.01);
        auto v = random_bf16(n + mo, 7 + n, 0.0, 1e-4);
        DeviceArray<float> dparam(param);
        DeviceArray<bf16> dm(m), dv(v), dcopy(static_cast<size_t>(n + po));
        for (int64_t step = 1; step <= 3; ++step) {
          hp.step = step;
          const auto grad = random_vector<float>(n + po, 20 * step + n, -2.0 * step, 2.0 * step);
          DeviceArray<float> dgrad(grad);
          adamw_update_bf16_moments_cuda(dparam.get() + po, dgrad.get() + po, dm.get() + mo,
                                         dv.get() + mo, with_copy ? dcopy.get() + po : nullptr, n,
                                         hp, nullptr);
          adamw_update_bf16_moments(param.data() + po, grad.data() + po, m.data() + mo,
                                    v.data() + mo, n, hp);
        }
        const auto got_param = dparam.download();
        const char* what = with_copy ? " with the bf16 copy" : "";
        EXPECT_EQ(float_bits_of(got_param), float_bits_of(param))
            << "param, n " << n << " offsets " << po << "," << mo << what;
        EXPECT_EQ(bits_of(dm.download()), bits_of(m))
            << "m, n " << n << " offsets " << po << "," << mo << what;
        EXPECT_EQ(bits_of(dv.download()), bits_of(v))
            << "v, n " << n << " offsets " << po << "," << mo << what;
        const auto copy = dcopy.download();
        for (int64_t i = 0; i < n + po; ++i) {
          const uint16_t want = with_copy && i >= po ? working_bits(param[i]) : 0xffff;
          ASSERT_EQ(copy[i].bits, want) << "bf16 copy at " << i << ", n " << n << what;
        }
      }
    }
  }
}

// The split master (working copy + remainder) against the whole fp32 master
// with its bf16 copy, over steps, fp32 and bf16 moments, aligned and not:
// the joined master, the working copy and the moments, every bit. About 1 in
// 2^17 updated parameters lands on a rounding tie, so the million-element
// case crosses several each step.
template <typename M>
void split_master_case(int64_t n, int64_t offset) {
  using spillway::testing::bits_of;
  AdamWHyper hp;
  hp.lr = 1e-3;
  hp.weight_decay = 0.1;
  hp.grad_scale = 0.7;
  const auto param = random_vector<float>(n + offset, 31 + n);
  std::vector<bf16> working(param.size());
  std::vector<uint16_t> remainder(param.size());
  split_master(param.data(), working.data(), remainder.data(), n + offset);
  std::vector<M> m(param.size()), v(param.size());
  for (size_t i = 0; i < param.size(); ++i) {
    const double mi = 0.01 * std::sin(static_cast<double>(i)), vi = 1e-4 * std::cos(static_cast<double>(i)) + 1e-4;
    if constexpr (std::is_same_v<M, float>) {
      m[i] = static_cast<float>(mi);
      v[i] = static_cast<float>(vi);
    } else {
      m[i] = to_bf16(static_cast<float>(mi));
      v[i] = to_bf16(static_cast<float>(vi));
    }
  }
  DeviceArray<float> dparam(param);
  DeviceArray<bf16> dcopy(param.size()), dworking(working);
  DeviceArray<uint16_t> dremainder(remainder);
  DeviceArray<M> dm_whole(m), dv_whole(v), dm_split(m), dv_split(v);
  for (int64_t step = 1; step <= 3; ++step) {
    hp.step = step;
    DeviceArray<float> dgrad(random_vector<float>(n + offset, 40 * step + n, -3, 3));
    const float* g = dgrad.get() + offset;
    if constexpr (std::is_same_v<M, float>) {
      adamw_update_cuda(dparam.get() + offset, g, dm_whole.get() + offset, dv_whole.get() + offset,
                        dcopy.get() + offset, n, hp, nullptr);
      adamw_update_split_cuda(dworking.get() + offset, dremainder.get() + offset, g, dm_split.get() + offset,
                              dv_split.get() + offset, n, hp, nullptr);
    } else {
      adamw_update_bf16_moments_cuda(dparam.get() + offset, g, dm_whole.get() + offset, dv_whole.get() + offset,
                                     dcopy.get() + offset, n, hp, nullptr);
      adamw_update_split_bf16_moments_cuda(dworking.get() + offset, dremainder.get() + offset, g,
                                           dm_split.get() + offset, dv_split.get() + offset, n, hp, nullptr);
    }
  }
  const auto whole = dparam.download();
  const auto got_working = dworking.download();
  const auto got_remainder = dremainder.download();
  std::vector<float> joined(whole.size());
  join_master(got_working.data(), got_remainder.data(), joined.data(), n + offset);
  const std::string what = "n " + std::to_string(n) + ", offset " + std::to_string(offset);
  // The element before the start was never touched: the initial split joins back.
  EXPECT_EQ(float_bits_of(joined), float_bits_of(whole)) << what;
  const auto copy = dcopy.download();
  for (int64_t i = offset; i < n + offset; ++i) {
    ASSERT_EQ(got_working[static_cast<size_t>(i)].bits, copy[static_cast<size_t>(i)].bits) << "at " << i << ", " << what;
  }
  if constexpr (std::is_same_v<M, float>) {
    EXPECT_EQ(float_bits_of(dm_split.download()), float_bits_of(dm_whole.download())) << what;
    EXPECT_EQ(float_bits_of(dv_split.download()), float_bits_of(dv_whole.download())) << what;
  } else {
    EXPECT_EQ(bits_of(dm_split.download()), bits_of(dm_whole.download())) << what;
    EXPECT_EQ(bits_of(dv_split.download()), bits_of(dv_whole.download())) << what;
  }
}

TEST(AdamWCuda, SplitMasterUpdatesAsTheWholeMaster) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : kSizes) {
    for (int64_t offset : {0, 1, 2}) {
      split_master_case<float>(n, offset);
      split_master_case<bf16>(n, offset);
    }
  }
}

TEST(AdamWCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t n = 100003;
  AdamWHyper hp;
  hp.weight_decay = 0.01;
  hp.step = 7;
  std::vector<uint32_t> first;
  for (int run = 0; run < 2; ++run) {
    DeviceArray<float> p(random_vector<float>(n, 1)), g(random_vector<float>(n, 2));
    DeviceArray<float> m(random_vector<float>(n, 3, -0.1, 0.1)),
        v(random_vector<float>(n, 4, 0, 0.1));
    adamw_update_cuda(p.get(), g.get(), m.get(), v.get(), nullptr, n, hp, nullptr);
    const auto bits = float_bits_of(p.download());
    if (run == 0) {
      first = bits;
    } else {
      EXPECT_EQ(bits, first);
    }
  }
}

TEST(AdamWCuda, RejectsStepZero) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  AdamWHyper hp;
  hp.step = 0;
  DeviceArray<float> buf(4);
  EXPECT_THROW(
      adamw_update_cuda(buf.get(), buf.get(), buf.get(), buf.get(), nullptr, 4, hp, nullptr),
      Error);
}

}  // namespace
}  // namespace spillway::ops

// The GPU split of fp32 masters into working copies and remainders, bit for
// bit the CPU's, with and without the remainder, at odd sizes and unaligned
// starts, on random values and on ties, infinities and NaNs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_device.h"
#include "ops/master_split.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::bits_of;
using spillway::testing::DeviceArray;
using spillway::testing::random_vector;

TEST(MasterSplitCuda, MatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{(1 << 20) + 3}}) {
    for (int64_t offset : {0, 1, 3}) {
      auto master = random_vector<float>(n + offset, 17 + n, -4, 4);
      const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7fffffu, 0x7f800000u,
                                   0xff800000u, 0x7fc00001u, 0xffffffffu, 0x00008000u, 0x80000000u};
      for (size_t i = 0; i < std::size(specials) && i < master.size(); ++i) master[i] = bits_float(specials[i]);
      std::vector<bf16> want_working(master.size());
      std::vector<uint16_t> want_remainder(master.size());
      split_master(master.data() + offset, want_working.data() + offset, want_remainder.data() + offset, n);
      for (bool with_remainder : {true, false}) {
        DeviceArray<float> dmaster(master);
        DeviceArray<bf16> dworking(master.size());
        DeviceArray<uint16_t> dremainder(master.size());
        split_master_cuda(dmaster.get() + offset, dworking.get() + offset,
                          with_remainder ? dremainder.get() + offset : nullptr, n, nullptr);
        const auto working = dworking.download();
        const auto remainder = dremainder.download();
        for (int64_t i = 0; i < n + offset; ++i) {
          const size_t k = static_cast<size_t>(i);
          // Before the start nothing is written: the 0xff poison stays.
          ASSERT_EQ(working[k].bits, i < offset ? 0xffffu : want_working[k].bits) << "working at " << i << ", n " << n;
          ASSERT_EQ(remainder[k], i < offset || !with_remainder ? 0xffffu : want_remainder[k])
              << "remainder at " << i << ", n " << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace spillway::ops

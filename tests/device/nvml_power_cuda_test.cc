#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "device/cuda/cuda_device.h"
#include "device/power_monitor.h"

namespace spillway {
namespace {

TEST(NvmlPower, ReadsTheGpuItRunsOn) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::string why;
  auto monitor = open_gpu_power_monitor(0, std::chrono::milliseconds(10), &why);
  ASSERT_NE(monitor, nullptr) << why;
  monitor->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  PowerSummary s = monitor->stop();
  ASSERT_GE(s.samples, 5);
  // An idle or busy data-centre GPU: some tens to a thousand watts, under
  // its own limit plus the driver's short overshoot.
  EXPECT_GT(s.limit_watts, 50);
  EXPECT_GT(s.median_watts, 10);
  EXPECT_LT(s.median_watts, 1.2 * s.limit_watts);
  EXPECT_GT(s.max_sm_mhz, 500);
  EXPECT_GT(s.median_sm_mhz, 0);
  EXPECT_LE(s.median_sm_mhz, s.max_sm_mhz);
  EXPECT_GT(s.max_celsius, 0);
  EXPECT_LT(s.max_celsius, 110);
}

TEST(NvmlPower, AnUnknownGpuIsRefusedWithAReason) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::string why;
  EXPECT_EQ(open_gpu_power_monitor(9999, std::chrono::milliseconds(10), &why), nullptr);
  EXPECT_NE(why.find("9999"), std::string::npos) << why;
}

}  // namespace
}  // namespace spillway

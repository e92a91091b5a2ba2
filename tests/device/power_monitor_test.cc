#include "device/power_monitor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace spillway {
namespace {

PowerSample at(double watts, double mhz, double celsius, bool capped, bool thermal = false) {
  return PowerSample{watts, mhz, celsius, capped, thermal};
}

TEST(SummarizePower, MediansFractionsAndTheHottestSample) {
  PowerSummary s = summarize_power({at(690, 1500, 60, true), at(700, 1400, 65, true), at(300, 1980, 55, false),
                                    at(695, 1520, 62, true, true)},
                                   700, 1980);
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.median_watts, 692.5);  // even count: the two middle values' mean
  EXPECT_DOUBLE_EQ(s.median_sm_mhz, 1510);
  EXPECT_DOUBLE_EQ(s.max_celsius, 65);
  EXPECT_DOUBLE_EQ(s.capped_fraction, 0.75);
  EXPECT_DOUBLE_EQ(s.thermal_fraction, 0.25);
  EXPECT_DOUBLE_EQ(s.limit_watts, 700);
  EXPECT_DOUBLE_EQ(s.max_sm_mhz, 1980);

  PowerSummary odd = summarize_power({at(3, 30, 0, false), at(1, 10, 0, false), at(2, 20, 0, false)}, 0, 0);
  EXPECT_DOUBLE_EQ(odd.median_watts, 2);
  EXPECT_DOUBLE_EQ(odd.median_sm_mhz, 20);
}

TEST(SummarizePower, NoSamplesSaysSo) {
  PowerSummary s = summarize_power({}, 700, 1980);
  EXPECT_EQ(s.samples, 0);
  EXPECT_DOUBLE_EQ(s.median_watts, 0);
  EXPECT_EQ(format_power(s), "no power samples");
}

TEST(FormatPower, OneLineWithTheCapAndTheClock) {
  PowerSummary s = summarize_power({at(692, 1515, 63, true)}, 700, 1980);
  EXPECT_EQ(format_power(s),
            "692 W median of a 700 W limit, power-capped in 100% of 1 samples, SM clock 1515 MHz median of "
            "1980, up to 63 C");
}

TEST(PowerMonitor, SamplesOnlyBetweenStartAndStop) {
  std::atomic<int> reads{0};
  PowerMonitor monitor(
      [&]() -> std::optional<PowerSample> {
        ++reads;
        return at(500, 1700, 50, reads % 2 == 0);
      },
      700, 1980, std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(reads.load(), 0);  // not started yet
  monitor.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  PowerSummary s = monitor.stop();
  const int after_stop = reads.load();
  EXPECT_GE(s.samples, 2);
  EXPECT_LE(s.samples, after_stop);
  EXPECT_DOUBLE_EQ(s.median_watts, 500);
  EXPECT_GT(s.capped_fraction, 0.2);
  EXPECT_LT(s.capped_fraction, 0.8);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(reads.load(), after_stop);  // stopped for good

  monitor.start();  // a second window starts empty
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_LE(monitor.stop().samples, reads.load() - after_stop);
}

TEST(PowerMonitor, FailedReadsAreSkipped) {
  PowerMonitor monitor([]() -> std::optional<PowerSample> { return std::nullopt; }, 700, 1980,
                       std::chrono::milliseconds(1));
  monitor.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(monitor.stop().samples, 0);
}

TEST(PowerMonitor, StopWithoutStartIsEmpty) {
  PowerMonitor monitor([] { return std::optional<PowerSample>(at(1, 1, 1, false)); }, 700, 1980,
                       std::chrono::milliseconds(1));
  EXPECT_EQ(monitor.stop().samples, 0);
}

#ifndef SPILLWAY_HAS_CUDA
TEST(OpenGpuPowerMonitor, SaysWhyWithoutCuda) {
  std::string why;
  EXPECT_EQ(open_gpu_power_monitor(0, std::chrono::milliseconds(50), &why), nullptr);
  EXPECT_EQ(why, "this spillway was built without CUDA");
}
#endif

}  // namespace
}  // namespace spillway

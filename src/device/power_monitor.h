// Power, SM clock and temperature of a GPU, sampled on a background thread
// while work runs. At the power cap a step takes as long as its energy
// allows, whatever its kernels reach alone (the H100 runs the 1B step there:
// docs/performance.md), so a benchmark reports whether it ran capped beside
// its tok/s.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace spillway {

struct PowerSample {
  double watts = 0;
  double sm_mhz = 0;
  double celsius = 0;
  bool power_capped = false;      // the driver lowered clocks to stay under the power limit
  bool thermal_slowdown = false;  // ... or because the GPU ran hot
};

struct PowerSummary {
  int64_t samples = 0;  // 0: nothing was read, the other fields are 0
  double limit_watts = 0;
  double max_sm_mhz = 0;  // the highest SM clock the GPU allows
  double median_watts = 0;
  double median_sm_mhz = 0;
  double max_celsius = 0;
  double capped_fraction = 0;  // of the samples
  double thermal_fraction = 0;
};

PowerSummary summarize_power(std::vector<PowerSample> samples, double limit_watts, double max_sm_mhz);

// One line: the median power against the limit, the share of samples
// capped, the median and highest SM clock, the hottest temperature.
std::string format_power(const PowerSummary& summary);

// Reads one sample; nullopt when the read failed (the sample is skipped).
using PowerReader = std::function<std::optional<PowerSample>()>;

class PowerMonitor {
 public:
  PowerMonitor(PowerReader read, double limit_watts, double max_sm_mhz, std::chrono::milliseconds period);
  ~PowerMonitor();
  PowerMonitor(const PowerMonitor&) = delete;
  PowerMonitor& operator=(const PowerMonitor&) = delete;

  // Starts sampling afresh (a running monitor restarts); stop() ends it and
  // summarizes what it read since start().
  void start();
  PowerSummary stop();

 private:
  void sample_until_stopped();

  PowerReader read_;
  double limit_watts_;
  double max_sm_mhz_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool running_ = false;
  std::vector<PowerSample> samples_;
  std::thread thread_;
};

// The monitor of CUDA device `ordinal`, read through NVML: the driver's
// libnvidia-ml.so.1, opened at run time so that spillway starts without it.
// nullptr, with the reason in *why, on a build without CUDA or a machine
// without NVML.
std::unique_ptr<PowerMonitor> open_gpu_power_monitor(int ordinal, std::chrono::milliseconds period,
                                                     std::string* why);

}  // namespace spillway

#include "device/power_monitor.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace spillway {

namespace {

double median(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)) + upper) / 2;
}

}  // namespace

PowerSummary summarize_power(std::vector<PowerSample> samples, double limit_watts, double max_sm_mhz) {
  PowerSummary s;
  s.limit_watts = limit_watts;
  s.max_sm_mhz = max_sm_mhz;
  if (samples.empty()) return s;
  s.samples = static_cast<int64_t>(samples.size());
  std::vector<double> watts, mhz;
  int64_t capped = 0, thermal = 0;
  for (const PowerSample& p : samples) {
    watts.push_back(p.watts);
    mhz.push_back(p.sm_mhz);
    s.max_celsius = std::max(s.max_celsius, p.celsius);
    capped += p.power_capped ? 1 : 0;
    thermal += p.thermal_slowdown ? 1 : 0;
  }
  s.median_watts = median(std::move(watts));
  s.median_sm_mhz = median(std::move(mhz));
  s.capped_fraction = static_cast<double>(capped) / static_cast<double>(s.samples);
  s.thermal_fraction = static_cast<double>(thermal) / static_cast<double>(s.samples);
  return s;
}

std::string format_power(const PowerSummary& s) {
  if (s.samples == 0) return "no power samples";
  char line[256];
  std::snprintf(line, sizeof line,
                "%.0f W median of a %.0f W limit, power-capped in %.0f%% of %lld samples, SM clock %.0f MHz "
                "median of %.0f, up to %.0f C%s",
                s.median_watts, s.limit_watts, 100 * s.capped_fraction, static_cast<long long>(s.samples),
                s.median_sm_mhz, s.max_sm_mhz, s.max_celsius, s.thermal_fraction > 0 ? ", thermal slowdown" : "");
  return line;
}

PowerMonitor::PowerMonitor(PowerReader read, double limit_watts, double max_sm_mhz,
                           std::chrono::milliseconds period)
    : read_(std::move(read)), limit_watts_(limit_watts), max_sm_mhz_(max_sm_mhz), period_(period) {}

PowerMonitor::~PowerMonitor() { stop(); }

void PowerMonitor::start() {
  stop();
  std::lock_guard<std::mutex> lock(mutex_);
  samples_.clear();
  running_ = true;
  thread_ = std::thread([this] { sample_until_stopped(); });
}

PowerSummary PowerMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  return summarize_power(samples_, limit_watts_, max_sm_mhz_);
}

void PowerMonitor::sample_until_stopped() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (running_) {
    // The read (an NVML call, up to a millisecond) runs unlocked so that
    // stop() never waits on it longer than one read.
    lock.unlock();
    std::optional<PowerSample> sample = read_();
    lock.lock();
    if (sample && running_) samples_.push_back(*sample);
    wake_.wait_for(lock, period_, [this] { return !running_; });
  }
}

#ifndef SPILLWAY_HAS_CUDA
std::unique_ptr<PowerMonitor> open_gpu_power_monitor(int, std::chrono::milliseconds, std::string* why) {
  if (why != nullptr) *why = "this spillway was built without CUDA";
  return nullptr;
}
#endif

}  // namespace spillway

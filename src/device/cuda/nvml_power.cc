// NVML through dlopen: the library comes with the driver, not the toolkit,
// and a build machine without a GPU has neither its header nor its library.
// The few entry points used are declared here from NVML's documented C API.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <memory>
#include <string>

#include "device/power_monitor.h"

namespace spillway {

namespace {

using NvmlReturn = int;  // nvmlReturn_t; NVML_SUCCESS is 0
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr int kClockSm = 1;            // NVML_CLOCK_SM
constexpr int kTemperatureGpu = 0;     // NVML_TEMPERATURE_GPU
constexpr unsigned long long kSwPowerCap = 0x4;
constexpr unsigned long long kThermal = 0x20 | 0x40;  // SW and HW thermal slowdown

class Nvml {
 public:
  // Throws nothing: ok() says whether NVML is usable, error() why not.
  explicit Nvml(int ordinal) {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr) {
      error_ = std::string("cannot open libnvidia-ml.so.1: ") + dlerror();
      return;
    }
    if (!bind(init_, "nvmlInit_v2") || !bind(shutdown_, "nvmlShutdown") ||
        !bind(by_bus_id_, "nvmlDeviceGetHandleByPciBusId_v2") || !bind(power_, "nvmlDeviceGetPowerUsage") ||
        !bind(limit_, "nvmlDeviceGetEnforcedPowerLimit") || !bind(clock_, "nvmlDeviceGetClockInfo") ||
        !bind(max_clock_, "nvmlDeviceGetMaxClockInfo") || !bind(temperature_, "nvmlDeviceGetTemperature")) {
      return;
    }
    // The reasons' newer name first; drivers before 535 only have the old one.
    if (!bind(reasons_, "nvmlDeviceGetCurrentClocksEventReasons") &&
        !bind(reasons_, "nvmlDeviceGetCurrentClocksThrottleReasons")) {
      return;
    }
    if (NvmlReturn r = init_(); r != 0) {
      error_ = "nvmlInit_v2 failed with NVML error " + std::to_string(r);
      return;
    }
    initialized_ = true;
    // CUDA and NVML number GPUs differently (CUDA_VISIBLE_DEVICES); the PCI
    // bus id names the same one in both.
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ordinal) != cudaSuccess) {
      cudaGetLastError();
      error_ = "cudaDeviceGetPCIBusId(" + std::to_string(ordinal) + ") failed";
      return;
    }
    if (NvmlReturn r = by_bus_id_(bus_id, &device_); r != 0) {
      error_ = std::string("nvmlDeviceGetHandleByPciBusId_v2(") + bus_id + ") failed with NVML error " +
               std::to_string(r);
      return;
    }
    unsigned limit_mw = 0, max_mhz = 0;
    if (limit_(device_, &limit_mw) != 0 || max_clock_(device_, kClockSm, &max_mhz) != 0) {
      error_ = "NVML cannot read the power limit or the maximum SM clock";
      return;
    }
    limit_watts_ = limit_mw / 1000.0;
    max_sm_mhz_ = max_mhz;
    ok_ = true;
  }
  ~Nvml() {
    if (initialized_) shutdown_();
    if (library_ != nullptr) dlclose(library_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  double limit_watts() const { return limit_watts_; }
  double max_sm_mhz() const { return max_sm_mhz_; }

  std::optional<PowerSample> read() const {
    unsigned mw = 0, mhz = 0, celsius = 0;
    unsigned long long reasons = 0;
    if (power_(device_, &mw) != 0 || clock_(device_, kClockSm, &mhz) != 0 ||
        temperature_(device_, kTemperatureGpu, &celsius) != 0 || reasons_(device_, &reasons) != 0) {
      return std::nullopt;
    }
    return PowerSample{mw / 1000.0, static_cast<double>(mhz), static_cast<double>(celsius),
                       (reasons & kSwPowerCap) != 0, (reasons & kThermal) != 0};
  }

 private:
  template <typename F>
  bool bind(F*& f, const char* name) {
    f = reinterpret_cast<F*>(dlsym(library_, name));
    if (f == nullptr) error_ = std::string("libnvidia-ml.so.1 has no ") + name;
    return f != nullptr;
  }

  void* library_ = nullptr;
  bool initialized_ = false;
  bool ok_ = false;
  std::string error_;
  NvmlDevice device_ = nullptr;
  double limit_watts_ = 0, max_sm_mhz_ = 0;
  NvmlReturn (*init_)() = nullptr;
  NvmlReturn (*shutdown_)() = nullptr;
  NvmlReturn (*by_bus_id_)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*power_)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*limit_)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*clock_)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*max_clock_)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*temperature_)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*reasons_)(NvmlDevice, unsigned long long*) = nullptr;
};

}  // namespace

std::unique_ptr<PowerMonitor> open_gpu_power_monitor(int ordinal, std::chrono::milliseconds period,
                                                     std::string* why) {
  auto nvml = std::make_shared<Nvml>(ordinal);
  if (!nvml->ok()) {
    if (why != nullptr) *why = nvml->error();
    return nullptr;
  }
  const double limit = nvml->limit_watts(), max_mhz = nvml->max_sm_mhz();
  return std::make_unique<PowerMonitor>([nvml] { return nvml->read(); }, limit, max_mhz, period);
}

}  // namespace spillway

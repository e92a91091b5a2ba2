#include "plan/machine_rates.h"

namespace spillway::plan {

MachineRates h100_rates() {
  // The measured ceilings (docs/performance.md, the planner's rates). A copy
  // stream gets half of what both links move together: offloaded steps keep
  // both busy at once.
  return MachineRates{"NVIDIA H100 80GB HBM3", 690e12, 530e12, 330e12, 3.0e12, 48e9, 48e9, 989e12};
}

MachineRates h200_rates() {
  // The H100's processor and host links with faster memory, at the device
  // copy's rate measured on the lent H200s.
  MachineRates r = h100_rates();
  r.name = "NVIDIA H200";
  r.memory_bytes = 4.3e12;
  return r;
}

MachineRates rates_for_gpu(std::string_view device_name) {
  return device_name.find("H200") != std::string_view::npos ? h200_rates() : h100_rates();
}

}  // namespace spillway::plan

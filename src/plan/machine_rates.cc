#include "plan/machine_rates.h"

namespace spillway::plan {

MachineRates h100_rates() {
  // The measured ceilings (docs/performance.md, the planner's rates). A copy
  // stream gets half of what both links move together: offloaded steps keep
  // both busy at once. The collectives' rate is what the 1B step's
  // gradient all-reduce took on 2 H200s (bench/results/gpu.jsonl,
  // 2026-11-27): about 150 GB/s sent by each rank.
  return MachineRates{"NVIDIA H100 80GB HBM3", 690e12, 530e12, 330e12, 3.0e12, 48e9, 48e9, 989e12, 150e9};
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

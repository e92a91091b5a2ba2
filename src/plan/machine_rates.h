// The rates a prediction divides work by: the machine's measured ceilings
// (DESIGN.md), so a prediction far from a measured step means the code, or
// the model, is wrong. One place for them, the MFU denominator included.
#pragma once

#include <string>
#include <string_view>

namespace spillway::plan {

struct MachineRates {
  std::string name;
  double gemm_flops;                   // dense bf16 matmul at training shapes
  double attention_flops;              // fused causal attention, forward and backward, head dim 128
  double attention_flops_head_dim_64;  // the same at head dim 64 (less work per load)
  double memory_bytes;                 // device memory, bytes read + written per second
  double h2d_bytes;                    // pinned host -> device
  double d2h_bytes;                    // device -> pinned host
  double peak_flops;                   // the MFU denominator: dense bf16 peak
  // What one GPU's collectives move to its peers on the host per second
  // (NCCL over NVLink): the bytes each rank sends, over the time.
  double collective_bytes = 150e9;
  // The same for the collectives inside a rank's graph (tensor and context
  // parallelism), where their groups stay within a host while the
  // data-parallel ranks span hosts; 0: collective_bytes.
  double graph_collective_bytes = 0;
  // The part of a collective's time that the compute it runs beside loses
  // (NCCL's kernels take SMs and memory bandwidth): LLaMA-3-8B on 4 H200s
  // ran 46 ms a micro-batch slower with 0.32 s of gathers and
  // reduce-scatters beside each (ZeRO-3) than with none (docs/parallel.md).
  double overlap_slowdown = 0.15;
};

// H100 80GB HBM3 and H200, measured on the lent machines
// (docs/performance.md has the measurements these come from).
MachineRates h100_rates();
MachineRates h200_rates();
// The rates of the GPU a device name describes ("NVIDIA H200", "cuda:0
// NVIDIA H100 80GB HBM3"): an H200's, else an H100's.
MachineRates rates_for_gpu(std::string_view device_name);

}  // namespace spillway::plan

// Predicts how long a step takes from what it does: FLOPs over the measured
// compute rate of each kind of op, bytes over the measured memory and link
// bandwidths. The numbers are the machine's measured ceilings (DESIGN.md),
// so a prediction far from a measured step means the code, or the model, is
// wrong.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "plan/placement.h"

namespace spillway::plan {

struct MachineRates {
  std::string name;
  double gemm_flops;       // dense bf16 matmul at training shapes
  double attention_flops;  // fused causal attention, forward and backward, head dim 128
  double attention_flops_head_dim_64;  // the same at head dim 64 (less work per load)
  double memory_bytes;     // device memory, bytes read + written per second
  double h2d_bytes;        // pinned host -> device
  double d2h_bytes;        // device -> pinned host
  double peak_flops;       // the MFU denominator
};

// H100 80GB HBM3, measured 2026-11-22 (DESIGN.md; matmul rate: the LLaMA
// step shapes through cuBLASLt).
MachineRates h100_rates();

struct NodeCost {
  double flops = 0;  // model FLOPs of the node (matmul, attention)
  double bytes = 0;  // device bytes the node reads and writes
  double seconds = 0;
};

NodeCost node_cost(const graph::Graph& graph, const graph::Node& node, const MachineRates& rates);

struct StepPrediction {
  std::vector<double> node_seconds;
  double compute_seconds = 0;
  double h2d_seconds = 0;
  double d2h_seconds = 0;
  // Copies overlap compute on their own streams, so the step takes the
  // longest of the three.
  double step_seconds = 0;
};

StepPrediction predict_step(const graph::Graph& graph, const Placement& placement, const MachineRates& rates);

// A picture of one predicted step: a row per stream (compute, host→device,
// device→host), each op or copy a bar as long as its predicted time.
std::string timeline_svg(const graph::Graph& graph, const Placement& placement, const StepPrediction& prediction,
                         const MachineRates& rates, const std::string& title);

}  // namespace spillway::plan

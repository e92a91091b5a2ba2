// The plan of a run configuration's training step: what `spillway plan`
// prints and `spillway.plan()` returns. The step is planned as the GPU
// engine would plan it (train/step_plan.h), for one or several GPUs of one
// host, with the batch as given or split for the fastest predicted step,
// and optionally for the most layers of the model's width that fit.
#pragma once

#include <cstdint>
#include <string>

#include "train/run_config.h"
#include "train/step_plan.h"

namespace spillway::train {

// What a plan takes besides its run configuration.
struct RunPlanOptions {
  int gpus = 1;             // data-parallel ranks, one per GPU
  int hosts = 1;            // the GPUs split evenly over them
  double link_rate = 0;     // GB/s each rank's collectives send; 0: the GPU's NVLink, or kNetworkRate across hosts
  bool batch_auto = false;  // split the step's sequences into the micro-batch size with the fastest step
  bool largest = false;     // plan the most layers that fit instead of the model's own count
  std::string gpu = "H100";  // the GPU to predict for: H100 or H200
};

struct RunPlan {
  // What was planned, per GPU: the model (its layer count the largest that
  // fits with `largest`), the batch and micro-batches chosen, the budgets.
  StepPlanRequest request;
  PlannedStep chosen;
  std::string model;  // run.model.config: a preset or a config.json
  std::string name;   // the model, or "the largest that fits: <model> with N layers"
  // Device bytes the GPU engine's kernel workspaces take outside the graph.
  uint64_t reserved = 0;
  // The least device budget the step graph runs in beside the resident state.
  uint64_t minimum_device_budget = 0;
  int gpus = 1, hosts = 1;
  int tp = 1;  // GPUs of a tensor-parallel group; gpus / tp data-parallel ranks
  bool batch_auto = false;
  std::string link_rate_source;  // where the collectives' rate came from: measured, given, assumed

  const plan::TrainingPlan& plan() const { return chosen.plan; }
  // The predicted timeline of one micro-batch, as SVG text.
  std::string timeline_svg() const;
};

// Across hosts the ring runs at the network's pace, not NVLink's: a 400
// Gb/s link per GPU, as the H100 clusters this plans for have, unless the
// rate `bench --collectives` measured is given.
inline constexpr double kNetworkRate = 50e9;

// What a GPU training process holds on the host beside its masters,
// moments, state and offloaded values: CUDA's context, the libraries, the
// data's pages. The GPU engine measures its own (resident memory less its
// arrays); a plan made without one assumes this.
inline constexpr uint64_t kHostRuntimeBytes = 4ull << 30;

// Error naming the flag or the budget when the step cannot be planned
// (--gpus, --grad-accum, --device-mem, --host-mem, ...).
RunPlan plan_run(const RunConfig& run, const RunPlanOptions& options);

}  // namespace spillway::train

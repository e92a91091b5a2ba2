// The plan of a run configuration's training step: what `spillway plan`
// prints and `spillway.plan()` returns. The step is planned as the GPU
// engine would plan it (train/step_plan.h), for one or several GPUs of one
// host, with the batch as given or split for the fastest predicted step,
// and optionally for the most layers of the model's width that fit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <optional>

#include "train/pipeline_plan.h"
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
  // Step graphs shared by several plans of one model (a search, the --shard
  // levels beside a plan); none: each plan builds its own.
  std::shared_ptr<LlamaStepCache> cache = nullptr;
};

struct RunPlan {
  // What was planned, per GPU: the model (its layer count the largest that
  // fits with `largest`), the batch and micro-batches chosen, the budgets.
  StepPlanRequest request;
  PlannedStep chosen;
  std::string model;  // run.model.config: a preset or a config.json
  std::string name;   // the model, or "the largest that fits: <model> with N layers"
  // Device bytes the GPU engine keeps outside the graph (train/device_reserve.h).
  uint64_t reserved = 0;
  // The least device budget the step graph runs in beside the resident state.
  uint64_t minimum_device_budget = 0;
  int gpus = 1, hosts = 1;
  // The layout, tp innermost: gpus = dp x pp x cp x tp. A rank plans its
  // own graph: its stage's layers, its chunk of each sequence, its part
  // of each layer's matrices.
  int dp = 1, pp = 1, cp = 1, tp = 1;
  std::optional<PipelinePricing> pipeline;  // with pp > 1: how the 1F1B step was priced
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
// (--gpus, --grad-accum, --device-mem, --host-mem, ...). The degrees are
// run.parallel's tp, pp and cp; the data-parallel ranks what they leave of
// the GPUs.
RunPlan plan_run(const RunConfig& run, const RunPlanOptions& options);

// A rank's request of run's layout (run.parallel's degrees) on
// options.gpus GPUs, its batch and micro-batches as given: what plan_run
// plans. `link_rate_source`: where the collectives' rate came from.
StepPlanRequest rank_request(const RunConfig& run, const RunPlanOptions& options,
                             std::string* link_rate_source = nullptr);

// Error naming the flag (--gpus, --tp, --pp, --cp, --batch, --grad-accum)
// where a layout of `gpus` GPUs cannot split the model or the step: the
// GPUs by the degrees, the heads and MLP width by tp, the layers by pp, the
// sequence by cp (one sequence a micro-batch), the micro-batches by dp.
void check_layout(const model::LlamaConfig& config, const RunConfig& run, int gpus, bool batch_auto);

}  // namespace spillway::train

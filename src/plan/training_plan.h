// A whole training step planned before it runs: where the weights, the
// gradient accumulators and the optimizer state live, the placement of the
// step graph's values under what is left of the device budget, and the
// predicted time. `spillway plan` prints it; the GPU engine runs it, so the
// prediction and the run describe the same program.
//
// The fp32 master weights (as the bf16 working copy plus a 16-bit
// remainder, ops/master_split.h) and AdamW moments live at home in pinned
// host memory; the optimizer streams the remainders and the moments through
// the GPU once per optimizer step. The bf16 working weights and the fp32 gradient accumulators stay on
// the device when they fit ("resident"), otherwise they live in host memory
// too: the placement loads the weights for the stretches that use them, and
// loads each gradient's running sum just before the node that adds to it
// and sends it back right after. Between all and none, the sums of the
// vocabulary-sized tensors (embedding, lm_head) can stay on the device
// alone: each micro-batch would move them whole, the embedding's for the
// few rows it touches and lm_head's at the loss, where memory is scarcest.
// Every layout that fits is planned and the fastest predicted one is kept.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "graph/autodiff.h"
#include "graph/graph.h"
#include "graph/recompute.h"
#include "model/llama_config.h"
#include "model/llama_graph.h"
#include "plan/cost_model.h"
#include "plan/placement.h"

namespace spillway::plan {

struct TrainingPlanRequest {
  model::LlamaConfig config;
  int64_t batch = 1, seq = 1, micro_batches = 1;
  uint64_t device_budget = 0;    // what the plan may use on the device
  uint64_t host_budget = 0;      // pinned host memory: optimizer state, host-side weights/gradients, offloaded values
  uint64_t device_reserved = 0;  // of device_budget, already taken by workspaces outside the graph
  bool stream_weights = false;   // only the layout with weights and gradients at home (tests, and to compare)
  bool bf16_moments = false;     // AdamW moments in bf16 (2 + 2 bytes per parameter instead of 4 + 4)
  // q|k|v and gate|up as single matmuls over stacked weights
  // (model::LlamaGraphOptions); the plan's parameters are then the stacks.
  bool fused_projections = false;
  // Forward values dropped after the forward pass and remade in the backward
  // pass (graph/recompute.h): less memory and traffic for more compute.
  graph::RecomputePolicy recompute = graph::RecomputePolicy::none;
  MachineRates rates;
};

struct TrainingPlan {
  graph::Graph graph;  // bf16 forward + backward, gradients accumulated into caller memory
  model::LlamaGraph model;
  graph::Gradients grads;
  bool weights_resident = false;  // bf16 working weights on the device for the whole run
  // By parameter (model.parameters' order): its fp32 gradient sum stays on
  // the device; otherwise it lives at home and each micro-batch loads and
  // stores it.
  std::vector<bool> grad_resident;
  bool all_grads_resident() const;
  uint64_t grad_elements_at_home = 0;
  Placement placement;
  uint64_t parameters = 0;
  uint64_t resident_bytes = 0;    // weights + gradients kept on the device
  uint64_t host_state_bytes = 0;  // masters' remainders, moments, host-side weights and gradients
  StepPrediction micro;           // one micro-batch
  double optimizer_seconds = 0;   // streaming the state through the GPU once
  double step_seconds = 0;        // micro_batches micro-batches + the optimizer
  double tokens_per_second = 0;
  double mfu = 0;

  // "weights and gradients on the device; 12 values offloaded" and the like.
  std::string layout() const;
};

// The step graph alone (layout not chosen yet): what an engine sizes its
// workspaces by before the layout is planned around them.
std::unique_ptr<TrainingPlan> training_graph(const TrainingPlanRequest& request);
// Chooses the layout and placement of `plan`'s graph. Throws Error naming
// --device-mem or --host-mem (and the amount needed) when none fits.
void choose_layout(TrainingPlan& plan, const TrainingPlanRequest& request);
// Both.
std::unique_ptr<TrainingPlan> plan_training(const TrainingPlanRequest& request);

// Whether the whole training state (bf16 weights, the fp32 master's other
// half, moments and gradients) and the step's activations fit `device_budget` without any
// planning: the case for the all-on-device engine.
bool fits_on_device(const model::LlamaConfig& config, int64_t batch, int64_t seq, uint64_t device_budget);

// The placement of `graph` on a GPU of `rates` under these budgets, with
// loads and stores timed by the cost model and the pool's best-fit arena
// replayed: what the training step and the planned engine's evaluation
// step both run under.
Placement plan_gpu_placement(const graph::Graph& graph, uint64_t device_budget, uint64_t host_budget,
                             std::vector<bool> resident, const MachineRates& rates);

// The time the optimizer takes to stream the masters' remainders and the
// moments (and gradients or weights that live at home) through the GPU and
// back.
double optimizer_seconds(uint64_t parameters, bool weights_resident, uint64_t grad_elements_at_home,
                         bool bf16_moments, const MachineRates& rates);

}  // namespace spillway::plan

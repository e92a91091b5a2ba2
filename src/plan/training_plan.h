// A whole training step planned before it runs: where each part of the
// training state lives, the placement of the step graph's values under what
// is left of the device budget, and the predicted time. `spillway plan`
// prints it; the GPU engine runs it, so the prediction and the run describe
// the same program.
//
// The state (plan/training_state.h) is the working weights the step reads,
// their gradient sums, and per parameter element the rest of the master and
// the optimizer's moments. The layouts, from the most to the least on the
// device:
//  - everything on the device: the optimizer updates in place and the step
//    copies nothing between device and host unless its activations do not
//    fit;
//  - the masters' rest and the moments at home in pinned host memory, which
//    the optimizer streams through the GPU once per optimizer step, with the
//    working weights and gradient sums on the device;
//  - the gradient sums at home too, but for those worth keeping first
//    (StateParameter::grad_kept_first) or none: each micro-batch loads a sum
//    just before the node that adds to it and sends it back right after;
//  - the working weights at home too, loaded for the stretches that use
//    them.
// Every layout the options allow and the budgets fit is planned; the fastest
// predicted one is kept.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "plan/cost_model.h"
#include "plan/placement.h"
#include "plan/training_state.h"

namespace spillway::plan {

// Which layouts a plan may choose.
enum class OffloadMode : uint8_t {
  automatic,  // any that fits; the fastest predicted
  on,         // the masters' rest and the moments at home, streamed by the optimizer
  off,        // everything on the device, and nothing offloaded during the step
  stream,     // on, with the working weights and the gradient sums at home too
};
std::string_view offload_mode_name(OffloadMode mode);  // "auto", "on", "off", "stream"
OffloadMode parse_offload_mode(std::string_view name);  // throws Error naming --offload and the choices

struct TrainingPlanRequest {
  uint64_t device_budget = 0;    // what the plan may use on the device
  uint64_t host_budget = 0;      // pinned host memory: state at home and offloaded values
  uint64_t device_reserved = 0;  // of device_budget, already taken by workspaces outside the graph
  // Of host_budget, what the process holds beside its training state and
  // offloaded values: CUDA's context, libraries, data. host_budget is the
  // whole process's.
  uint64_t host_reserved = 0;
  int64_t micro_batches = 1;     // per optimizer step
  OffloadMode offload = OffloadMode::automatic;
  // Ranks whose gradient sums are summed every optimizer step.
  int data_parallel = 1;
  // Only layouts with every gradient sum on the device (data parallelism
  // sums them across the ranks there).
  bool gradient_sums_on_device = false;
  MachineRates rates;
  // What one micro-batch processes, for tokens per second and MFU.
  double tokens_per_micro_batch = 0;
  double flops_per_token = 0;
};

// The state's bytes by part, over all parameters.
struct StateBytes {
  uint64_t elements = 0, weights = 0, grads = 0, master = 0, optimizer = 0;  // master and optimizer: one share
  uint64_t shards = 1;  // TrainingStateSpec::state_shards
};
StateBytes state_bytes(const graph::Graph& step, const TrainingStateSpec& state);

struct TrainingPlan {
  bool optimizer_resident = false;  // the masters' rest and the moments on the device
  bool weights_resident = false;    // the working weights on the device for the whole run
  // By parameter (the state's order): its gradient sum stays on the device;
  // otherwise it lives at home and each micro-batch loads and stores it.
  std::vector<bool> grad_resident;
  bool all_grads_resident() const;
  uint64_t parameters = 0;  // elements
  uint64_t grad_elements_at_home = 0;
  Placement placement;
  uint64_t resident_bytes = 0;    // state (and inputs, and the optimizer's staging) kept on the device
  uint64_t host_state_bytes = 0;  // state at home
  // The rest of the process's host memory: the caller's masters and
  // moments (TrainingStateSpec) and the request's host_reserved.
  uint64_t host_process_bytes = 0;
  // Of host_process_bytes, the caller's arrays: held at start-up and let go
  // of before the step's offloaded values take their room (the engine
  // lets go of that room before the masters are read back at the end), so
  // the two share it.
  uint64_t host_startup_bytes = 0;
  StepPrediction micro;           // one micro-batch
  double optimizer_seconds = 0;   // the update, in place or streaming the state through the GPU
  // Data parallelism: what each rank sends its peers per optimizer step (the
  // gradient sums' all-reduce or reduce-scatter, and with sharded state the
  // weights' all-gather), and the time of it the step waits for.
  uint64_t bytes_communicated = 0;
  double communication_seconds = 0;
  double step_seconds = 0;        // micro_batches micro-batches + communication + the optimizer
  double tokens_per_second = 0;
  double mfu = 0;
  std::string kept_first_label;  // TrainingStateSpec::kept_first_label

  // The whole state and every activation stay on the device: nothing moves
  // between device and host, in the step or in the optimizer (a
  // single-stream step, which a CUDA graph can replay).
  bool all_on_device() const;
  // "weights and gradients on the device; 12 activations offloaded" and the like.
  std::string layout() const;
};

// Chooses the layout and placement of the state and of `step`'s values.
// Throws Error naming --device-mem or --host-mem (and the amount needed)
// when no layout the options allow fits.
TrainingPlan plan_training(const graph::Graph& step, const TrainingStateSpec& state,
                           const TrainingPlanRequest& request);

// The placement of `graph` on a GPU of `rates` under these budgets, with
// loads and stores timed by the cost model and the pool's best-fit arena
// replayed: what the training step and an evaluation step both run under.
// `host_taken`: host memory already spent beside `host_budget` (for errors).
Placement plan_gpu_placement(const graph::Graph& graph, uint64_t device_budget, uint64_t host_budget,
                             std::vector<bool> resident, const MachineRates& rates, uint64_t host_taken = 0);

// The optimizer's time: in place, reading and writing the state at the
// device's memory rate (and the gradient sums once more for their norm), or
// streaming what lives at home through the GPU and back.
double optimizer_seconds(const StateBytes& state, bool optimizer_resident, bool weights_resident,
                         uint64_t grad_bytes_at_home, const MachineRates& rates);

}  // namespace spillway::plan

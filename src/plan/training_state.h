// The training state a step keeps from one optimizer step to the next, as
// the planner sees it: which values of the step graph are the parameters and
// their gradient sums, and how many bytes of other state (the rest of each
// master weight, the optimizer's moments) every parameter element carries.
// The planner knows no model and no optimizer; the caller that does
// (train/step_plan.h) describes them here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace spillway::plan {

struct StateParameter {
  graph::Value weight;  // the working copy the step reads
  graph::Value grad;    // its gradient sum, accumulated into state memory (Graph::mark_accumulated)
  // A sum worth keeping on the device first when not all of them fit: one
  // that every micro-batch would otherwise move whole where memory is
  // scarcest (LLaMA's vocabulary-sized embedding and lm_head, at the loss).
  bool grad_kept_first = false;
};

struct TrainingStateSpec {
  std::vector<StateParameter> parameters;
  // What the sums kept first are, for describing a plan ("the
  // vocabulary-sized ones").
  std::string kept_first_label = "those kept first";
  // Bound to the device for the whole step (token ids, targets).
  std::vector<graph::Value> inputs;
  // Per parameter element, beside the working copy and the gradient sum
  // (whose bytes are their values' in the graph): the rest of the master
  // weight, and the optimizer's state.
  uint64_t master_bytes = 0;
  uint64_t optimizer_bytes = 0;
  // Data parallelism that shards the master's rest and the optimizer's
  // state evenly over this many ranks: each keeps one share.
  uint64_t state_shards = 1;
  // Sharded further: the gradient sums too (ZeRO-2), and the weights
  // (ZeRO-3). They are then whole only in rings of `ring_bytes` on the
  // device while a step runs; every micro-batch reduce-scatters the sums
  // (and all-gathers the weights, forward and backward) under its compute,
  // but for about `ring_tail_bytes` of them at its ends. Everything stays on
  // the device.
  bool shard_gradients = false, shard_weights = false;
  uint64_t ring_bytes = 0, ring_tail_bytes = 0;
  // Host bytes per parameter element the caller holds at its peak (start-up,
  // before the state has taken its arrays): its master weights, and the
  // moments it brings. Where a layout keeps the moments at home and they are
  // the caller's own (the same bytes as optimizer_bytes), they are that home
  // state, counted once.
  uint64_t caller_master_bytes = 0;
  uint64_t caller_optimizer_bytes = 0;
  // Device memory the optimizer takes to stream state that lives at home
  // through the GPU (its staging buffers); none when that state is on the
  // device.
  uint64_t staging_bytes = 0;
};

}  // namespace spillway::plan

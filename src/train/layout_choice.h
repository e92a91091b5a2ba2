// The layout `train` runs on GPUs when no degree (--dp, --tp, --pp, --cp)
// is given: the fastest predicted of the planner's search among the
// layouts the GPU engine runs (LayoutSearchOptions::gpu_engine; pipeline
// and context parallelism for text data alone), so that a run of several
// GPUs takes what `spillway plan --gpus N` would choose for it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "train/layout_search.h"
#include "train/run_config.h"

namespace spillway::train {

struct LayoutChoice {
  Layout layout;
  double step_seconds = 0;  // predicted
  std::string line;         // what the lead rank prints
};

// None where the degrees were given, or for one GPU: the run keeps its
// own. `device_budget`: each GPU's; `host_budget`: each host's. Where no
// layout fits the planner's budgets, the choice is plain data parallelism
// (the engine then plans and says what does not fit).
std::optional<LayoutChoice> choose_gpu_layout(const RunConfig& run, int gpus, int hosts, const std::string& gpu,
                                              uint64_t device_budget, uint64_t host_budget);

}  // namespace spillway::train

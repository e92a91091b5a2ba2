// What `spillway plan` prints of the layouts beside the one it details:
// every tensor-parallel split of the GPUs (when --tp alone was given), or
// the layouts the planner searched (when no degree was).
#pragma once

#include "train/layout_search.h"
#include "train/run_config.h"
#include "train/run_plan.h"

namespace spillway::cli {

// Every way to split the GPUs into tensor-parallel groups, each planned as
// `train` would run it, the fastest marked, for --tp to take.
void print_tensor_parallel_layouts(const train::RunConfig& run, const train::RunPlanOptions& options);

// The fastest layouts found (the first the choice), then briefly the ones
// not planned and why.
void print_layout_search(const train::LayoutSearch& search, int gpus);

// With pp or cp: how the pipeline's step was priced, and what a context
// rank holds and gathers.
void print_split_lines(const train::RunPlan& planned);

}  // namespace spillway::cli

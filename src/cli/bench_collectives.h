// `spillway bench --collectives`: the link rate between the ranks of a run,
// measured (dist/collective_rates.h) over the launcher, communicator and
// device a training run of the same flags would use.
#pragma once

#include <string>

#include "train/run_config.h"

namespace spillway::cli {

// Prints the rate of each collective at each size and the one the planner
// takes (`plan --link-rate`); appends one JSON line to `json_path` if set.
int run_collectives_bench(const train::RunConfig& config, const std::string& json_path);

}  // namespace spillway::cli

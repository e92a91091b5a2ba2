// The ranks of a training run, met: `train --nproc-per-node N` starts them
// on this host, or a launcher (torchrun, mpirun, srun) did; each rank then
// joins the others through the dist/ layer and trains its data-parallel
// share through the train/ layer.
#pragma once

#include <memory>
#include <optional>

#include "dist/world.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace spillway::cli {

struct TrainingRanks {
  std::unique_ptr<dist::World> world;  // null for a run of one process
  train::DataParallelRun data_parallel;
};

// The exit code when this process only started the ranks (and waited for
// them), else nothing: this process is a rank, and `ranks` says which.
std::optional<int> start_ranks_here(const train::RunConfig& config);
TrainingRanks meet_ranks(const train::RunConfig& config, train::Command command);

// The configuration this rank trains: `config`, and on GPUs with no degree
// given, the layout the planner chose for the run's GPUs (every rank plans
// alike; the lead says which). On the CPU, whose step the planner's GPU
// rates say nothing about, every rank stays a data-parallel rank.
train::RunConfig with_planned_layout(const train::RunConfig& config);

}  // namespace spillway::cli

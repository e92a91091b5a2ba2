// Pipeline-parallel training on two GPUs through NCCL, ranks as processes
// started by `--nproc-per-node 2 --pp 2`: two GPUs each holding half of
// the layers and their state, the micro-batches in 1F1B order, train what
// one GPU trains, a tied table's two copies too; with data parallelism
// beside (4 GPUs: pp2 x dp2) too; a run saved split resumes on one GPU.
#include "e2e/gpu_split_runs.h"

namespace spillway::e2e {
namespace {

class PipelineParallelGpus : public GpuSplitRuns {
 protected:
  PipelineParallelGpus() : GpuSplitRuns("pipeline_parallel_gpus") {}
  void SetUp() override {
    GpuSplitRuns::SetUp();
    write_heads64_config("untied.json", 4, false);  // an lm_head of its own
  }
};

TEST_F(PipelineParallelGpus, TwoGpusHoldingHalfTheLayersEachTrainWhatOneTrains) {
  train("one", "", "untied.json");
  train("pp2", "--nproc-per-node 2 --pp 2", "untied.json");
  expect_same_training("pp2", "one");
  if (cuda_device_count() >= 4) {
    train("pp2-dp2", "--nproc-per-node 4 --pp 2 --dp 2", "untied.json");
    expect_same_training("pp2-dp2", "one");
  }
}

TEST_F(PipelineParallelGpus, ASplitRunResumesOnOneGpu) {
  train("one", "", "untied.json");
  train("moved", "--nproc-per-node 2 --pp 2 --stop-after 5", "untied.json");
  train("moved", "--resume", "untied.json");
  expect_same_training("moved", "one");
}

// A tied table: the embedding on the first stage, its copy for lm_head on
// the last, their gradients summed on both.
TEST_F(PipelineParallelGpus, ATiedModelTrainsWhatOneTrains) {
  write_heads64_config("tied.json", 4, true);
  train("tied-one", "", "tied.json");
  train("tied-pp2", "--nproc-per-node 2 --pp 2", "tied.json");
  expect_same_training("tied-pp2", "tied-one");
}

}  // namespace
}  // namespace spillway::e2e

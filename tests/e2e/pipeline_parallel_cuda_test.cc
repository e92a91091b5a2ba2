// Pipeline-parallel training on two GPUs through NCCL, ranks as processes
// started by `--nproc-per-node 2 --pp 2`: two GPUs each holding half of
// the layers and their state, the micro-batches in 1F1B order, train what
// one GPU trains; with data parallelism beside (4 GPUs: pp2 x dp2) too; a
// run saved split resumes on one GPU; a tied model is refused in one line.
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

TEST_F(PipelineParallelGpus, ATiedModelIsRefusedInOneLine) {
  const CommandResult r = run_spillway("train --device cuda --config " + (dir_ / "micro.json") +
                                       " --vocab 300 --data " + (dir_ / "corpus.txt") + " --separator % " +
                                       schedule_ + " --steps 2 --nproc-per-node 2 --pp 2 --out " + (dir_ / "tied"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("spillway: --pp: the GPU engine does not yet split a model whose output layer is its"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace spillway::e2e

// Tensor-parallel training on two GPUs through NCCL, ranks as processes
// started by `--nproc-per-node 2 --tp 2`: two GPUs splitting every layer
// train what one GPU trains, with and without sequence parallelism, and a
// run saved split resumes on one GPU.
#include "e2e/gpu_split_runs.h"

namespace spillway::e2e {
namespace {

class TensorParallelGpus : public GpuSplitRuns {
 protected:
  TensorParallelGpus() : GpuSplitRuns("tensor_parallel_gpus") {}
};

TEST_F(TensorParallelGpus, TwoGpusSplittingTheLayersTrainWhatOneTrains) {
  train("one", "");
  train("tp2", "--nproc-per-node 2 --tp 2");
  train("tp2-whole-stream", "--nproc-per-node 2 --tp 2 --no-sequence-parallel");
  expect_same_training("tp2", "one");
  expect_same_training("tp2-whole-stream", "one");
}

TEST_F(TensorParallelGpus, ASplitRunResumesOnOneGpu) {
  train("one", "");
  train("moved", "--nproc-per-node 2 --tp 2 --stop-after 5");
  train("moved", "--resume");
  expect_same_training("moved", "one");
}

}  // namespace
}  // namespace spillway::e2e

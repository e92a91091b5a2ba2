// Tensor-parallel training on the CPU backend, ranks as processes, through
// the command line users get (`--tp N` with `--nproc-per-node`): ranks that
// split every layer between them train what one rank trains, with and
// without sequence parallelism and beside data parallelism; the checkpoint
// is the whole model, so a run saved split resumes on one rank and the
// other way round; a split the model does not allow is one clear error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "e2e/split_runs.h"

namespace spillway::e2e {
namespace {

class TensorParallel : public SplitRuns {
 protected:
  TensorParallel() : SplitRuns("tensor_parallel") {}
};

TEST_F(TensorParallel, RanksSplittingTheLayersTrainWhatOneRankTrains) {
  train("one", "");
  train("tp2", "--nproc-per-node 2 --tp 2");
  train("tp2-whole-stream", "--nproc-per-node 2 --tp 2 --no-sequence-parallel");
  train("tp2-dp2", "--nproc-per-node 4 --tp 2");
  for (const char* run : {"tp2", "tp2-whole-stream", "tp2-dp2"}) expect_same_training(run, "one");
}

TEST_F(TensorParallel, ASplitRunResumesOnOneRankAndTheOtherWayRound) {
  train("one", "");
  train("split-then-one", "--nproc-per-node 2 --tp 2 --stop-after 5");
  train("split-then-one", "--resume");
  train("one-then-split", "--stop-after 5");
  train("one-then-split", "--nproc-per-node 2 --tp 2 --resume");
  expect_same_training("split-then-one", "one");
  expect_same_training("one-then-split", "one");
}

TEST_F(TensorParallel, ASplitTheModelDoesNotAllowIsOneClearError) {
  // 64 tokens a micro-batch do not split over three ranks; with the stream
  // whole, four query heads do not either.
  const CommandResult tokens = run("three", "--nproc-per-node 3 --tp 3");
  EXPECT_NE(tokens.exit_code, 0);
  EXPECT_NE(tokens.out.find("64 tokens of a micro-batch do not split evenly over 3 ranks"), std::string::npos)
      << tokens.out;
  const CommandResult heads = run("three-whole", "--nproc-per-node 3 --tp 3 --no-sequence-parallel");
  EXPECT_NE(heads.exit_code, 0);
  EXPECT_NE(heads.out.find("heads"), std::string::npos) << heads.out;
  EXPECT_NE(heads.out.find("3 ranks"), std::string::npos) << heads.out;
  const CommandResult sharded = run("sharded", "--nproc-per-node 2 --tp 2 --shard optimizer");
  EXPECT_NE(sharded.exit_code, 0);
  EXPECT_NE(sharded.out.find("--shard optimizer"), std::string::npos) << sharded.out;
  const CommandResult grid = run("grid", "--nproc-per-node 3 --tp 2");
  EXPECT_NE(grid.exit_code, 0);
  EXPECT_NE(grid.out.find("tp"), std::string::npos) << grid.out;
}

}  // namespace
}  // namespace spillway::e2e

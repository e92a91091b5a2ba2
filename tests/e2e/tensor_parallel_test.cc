// Tensor-parallel training on the CPU backend, ranks as processes, through
// the command line users get (`--tp N` with `--nproc-per-node`): ranks that
// split every layer between them train what one rank trains, with and
// without sequence parallelism and beside data parallelism; the checkpoint
// is the whole model, so a run saved split resumes on one rank and the
// other way round; a split the model does not allow is one clear error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

class TensorParallel : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef SPILLWAY_HAS_GLOO
    GTEST_SKIP() << "built without Gloo: the CPU backend runs one rank";
#endif
    write_file(dir_ / "corpus.txt", make_corpus(400, 7));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  // Four micro-batches of 2 x 32 tokens an optimizer step.
  CommandResult run(const std::string& out, const std::string& more) {
    return run_spillway("train --device cpu --config " + (dir_ / "micro.json") + " --vocab 300 --data " +
                        (dir_ / "corpus.txt") +
                        " --separator % --batch 2 --seq 32 --grad-accum 4 --steps 10 --eval-every 5 "
                        "--checkpoint-every 5 --sample-tokens 0 --lr 1e-2 --warmup 2 --quiet --out " +
                        (dir_ / out) + " " + more);
  }
  void train(const std::string& out, const std::string& more) {
    const CommandResult r = run(out, more);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // A split layer sums its products in pieces, per rank and then over the
  // ranks, so float rounding differs from one rank's: after ten AdamW steps
  // at lr 1e-2 the losses agree to ~2e-8 and the weights to ~8e-6
  // (measured); a wrong piece or a missing sum moves the losses by 1e-2.
  void expect_same_training(const std::string& a, const std::string& b) {
    const std::vector<double> la = step_losses(dir_ / a), lb = step_losses(dir_ / b);
    ASSERT_EQ(la.size(), 10u) << a;
    ASSERT_EQ(lb.size(), 10u) << b;
    for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-6 * la[i]) << a << " step " << i + 1;
    EXPECT_LT(max_weight_difference(dir_ / (a + "/step-0000010"), dir_ / (b + "/step-0000010")), 5e-5f) << a;
  }
  ScratchDir dir_{"tensor_parallel"};
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

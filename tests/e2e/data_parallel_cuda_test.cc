// Data-parallel training on two GPUs through NCCL, ranks as processes
// started by `--nproc-per-node 2`: the optimizer's state sharded over the
// ranks trains the same bits as every rank keeping it whole (the same sums:
// a two-rank reduction adds the same two numbers either way), resumes
// bit-identically, and two GPUs train what one does.
#include <gtest/gtest.h>

#include <cstdlib>

#include "device/cuda/cuda_device.h"
#include "e2e/e2e_util.h"
#include "e2e/processes.h"

namespace spillway::e2e {
namespace {

class DataParallelGpus : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
    // The ranks inherit it: NVLink multicast stays off on the lent machines,
    // where it can take a shared host's GPUs out of service.
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    write_file(dir_ / "corpus.txt", make_corpus(400, 7));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  // Four micro-batches of 2 x 32 tokens an optimizer step, over any ranks.
  std::string train_args(const std::string& out, int steps, int micro_batches = 4) {
    return "train --device cuda --config " + (dir_ / "micro.json") + " --vocab 300 --data " + (dir_ / "corpus.txt") +
           " --separator % --batch 2 --seq 32 --grad-accum " + std::to_string(micro_batches) + " --steps " +
           std::to_string(steps) +
           " --eval-every 5 --checkpoint-every 5 --sample-tokens 0 --lr 1e-2 --warmup 2 --quiet --out " + (dir_ / out);
  }
  void train(const std::string& out, int steps, const std::string& more, int micro_batches = 4) {
    const CommandResult r = run_spillway(train_args(out, steps, micro_batches) + " " + more);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  std::string checkpoint(const std::string& run, int step) {
    char name[32];
    std::snprintf(name, sizeof name, "/step-%07d", step);
    return dir_ / run + name;
  }
  ScratchDir dir_{"data_parallel_gpus"};
};

TEST_F(DataParallelGpus, ShardedStateTrainsTheSameBitsAsWholeState) {
  train("whole", 10, "--nproc-per-node 2 --shard none");
  train("sharded", 10, "--nproc-per-node 2 --shard optimizer");
  EXPECT_EQ(step_losses(dir_ / "whole"), step_losses(dir_ / "sharded"));
  EXPECT_EQ(max_weight_difference(checkpoint("whole", 10), checkpoint("sharded", 10)), 0.0f);
  // The moments, gathered from the shares, are the whole state's.
  EXPECT_EQ(read_file(checkpoint("whole", 10) + "/optimizer.safetensors"),
            read_file(checkpoint("sharded", 10) + "/optimizer.safetensors"));
}

// Sharded gradient sums (ZeRO-2) and weights (ZeRO-3): with one
// micro-batch a rank, each sum is the same two numbers added, so the bits
// are whole state's; with two, each micro-batch's sums are reduced apart
// ((a1 + b1) + (a2 + b2) for (a1 + a2) + (b1 + b2)), which rounding alone
// tells apart.
TEST_F(DataParallelGpus, ShardedSumsAndWeightsTrainWhatWholeStateTrains) {
  train("whole", 10, "--nproc-per-node 2 --shard none", 2);
  for (const char* level : {"gradients", "weights"}) {
    SCOPED_TRACE(level);
    const std::string run = std::string("sharded-") + level;
    train(run, 10, std::string("--nproc-per-node 2 --shard ") + level, 2);
    EXPECT_EQ(step_losses(dir_ / "whole"), step_losses(dir_ / run));
    EXPECT_EQ(max_weight_difference(checkpoint("whole", 10), checkpoint(run, 10)), 0.0f);
    EXPECT_EQ(read_file(checkpoint("whole", 10) + "/optimizer.safetensors"),
              read_file(checkpoint(run, 10) + "/optimizer.safetensors"));
  }
  train("whole4", 10, "--nproc-per-node 2 --shard none");
  train("weights4", 10, "--nproc-per-node 2 --shard weights");
  const std::vector<double> a = step_losses(dir_ / "whole4"), b = step_losses(dir_ / "weights4");
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 10u);
  EXPECT_EQ(a[0], b[0]);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-3 * a[i]) << "step " << i + 1;
  // Saved sharded, resumed whole on one GPU: the same run goes on.
  train("moved", 10, "--nproc-per-node 2 --shard weights --stop-after 5");
  train("moved", 10, "--resume");
  const std::vector<double> moved = step_losses(dir_ / "moved");
  ASSERT_EQ(moved.size(), 10u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(moved[i], b[i]);
  for (size_t i = 5; i < 10; ++i) EXPECT_NEAR(moved[i], b[i], 2e-3 * b[i]) << "step " << i + 1;
}

TEST_F(DataParallelGpus, ShardedRunsResumeBitIdentically) {
  train("straight", 10, "--nproc-per-node 2 --shard optimizer");
  train("resumed", 10, "--nproc-per-node 2 --shard optimizer --stop-after 5");
  train("resumed", 10, "--nproc-per-node 2 --shard optimizer --resume");
  EXPECT_EQ(step_losses(dir_ / "straight"), step_losses(dir_ / "resumed"));
  EXPECT_EQ(max_weight_difference(checkpoint("straight", 10), checkpoint("resumed", 10)), 0.0f);
}

// Two ranks add their micro-batches' gradients in another order than one
// rank does, and the bf16 working weights round what differs: the first
// step's loss is the same, the second's within 1e-4, and later ones drift
// by rounding only (a rank training the wrong share moves them by ~1e-2).
TEST_F(DataParallelGpus, TwoGpusTrainWhatOneTrains) {
  train("one", 10, "");
  train("two", 10, "--nproc-per-node 2");
  const std::vector<double> a = step_losses(dir_ / "one"), b = step_losses(dir_ / "two");
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 10u);
  EXPECT_NEAR(a[0], b[0], 1e-6 * a[0]);
  EXPECT_NEAR(a[1], b[1], 1e-4 * a[1]);
  for (size_t i = 2; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-3 * a[i]) << "step " << i + 1;
}

// NCCL waits for a peer for ever; the ranks do not: a rank stopped (SIGSTOP)
// mid-run ends the other within --rank-timeout, naming the cause, and the
// run ends with an error.
TEST_F(DataParallelGpus, AHungRankEndsTheOtherWithinTheTimeout) {
  const std::vector<std::string> args = words_of(train_args("hung", 100000) + " --nproc-per-node 2 --rank-timeout 10");
  const std::string log = dir_ / "hung.log";
  const std::optional<HungRun> hung = hang_a_rank_after_a_step(args, dir_ / "hung", log);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->exit_code, 1) << read_file(log);
  EXPECT_LT(hung->ended_after, 60s);
  const std::string out = read_file(log);
  EXPECT_NE(out.find("did not finish within 10 s (--rank-timeout): another rank died or hangs"), std::string::npos)
      << out;
  EXPECT_NE(out.find("rank 0: ended with exit code 1; stopping the other ranks"), std::string::npos) << out;
}

}  // namespace
}  // namespace spillway::e2e

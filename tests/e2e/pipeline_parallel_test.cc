// Pipeline-parallel training on the CPU backend, ranks as processes, through
// the command line users get (`--pp S` with `--nproc-per-node`): ranks that
// each hold a stage of the layers train what one rank trains, a tied table
// kept alike on the first and last stage, one stage a rank (1F1B) or
// several (interleaved 1F1B), beside data parallelism and with each stage's
// layers split by tensor parallelism; the
// checkpoint is the whole model, so a run saved in stages resumes on one
// rank and the other way round; a split the model does not allow is one
// clear error.
#include <gtest/gtest.h>


#include <chrono>
#include <string>
#include <vector>

#include "e2e/processes.h"
#include "e2e/split_runs.h"

namespace spillway::e2e {
namespace {

class PipelineParallel : public SplitRuns {
 protected:
  PipelineParallel() : SplitRuns("pipeline_parallel") {}
};

TEST_F(PipelineParallel, RanksHoldingStagesTrainWhatOneRankTrains) {
  train("one", "");
  train("pp2", "--nproc-per-node 2 --pp 2");
  train("pp2-dp2", "--nproc-per-node 4 --pp 2");
  // Stages whose layers are split over two ranks each (the tied table too).
  train("pp2-tp2", "--nproc-per-node 4 --pp 2 --tp 2");
  for (const char* run : {"pp2", "pp2-dp2", "pp2-tp2"}) expect_same_training(run, "one");
  train("one4", "", "micro4.json");
  train("pp4", "--nproc-per-node 4 --pp 4", "micro4.json");
  expect_same_training("pp4", "one4");
}

// Two stages a rank, interleaved 1F1B: the four layers cut into four
// stages, rank 0 holding the first and third.
TEST_F(PipelineParallel, RanksHoldingInterleavedStagesTrainWhatOneRankTrains) {
  train("one4", "", "micro4.json");
  train("pp2-v2", "--nproc-per-node 2 --pp 2 --virtual-stages 2", "micro4.json");
  train("pp2-v2-dp2", "--nproc-per-node 4 --pp 2 --virtual-stages 2", "micro4.json");
  for (const char* run : {"pp2-v2", "pp2-v2-dp2"}) expect_same_training(run, "one4");
}

TEST_F(PipelineParallel, ARunInStagesResumesOnOneRankAndTheOtherWayRound) {
  train("one", "");
  train("stages-then-one", "--nproc-per-node 2 --pp 2 --stop-after 5");
  train("stages-then-one", "--resume");
  train("one-then-stages", "--stop-after 5");
  train("one-then-stages", "--nproc-per-node 2 --pp 2 --resume");
  expect_same_training("stages-then-one", "one");
  expect_same_training("one-then-stages", "one");
}

TEST_F(PipelineParallel, ASplitTheModelDoesNotAllowIsOneClearError) {
  const CommandResult stages = run("three", "--nproc-per-node 3 --pp 3");  // two layers
  EXPECT_NE(stages.exit_code, 0);
  EXPECT_NE(stages.out.find("3 pipeline stages need at least as many layers; the model has 2"), std::string::npos)
      << stages.out;
  const CommandResult chunks = run("chunks", "--nproc-per-node 2 --pp 2 --virtual-stages 2");  // four stages
  EXPECT_NE(chunks.exit_code, 0);
  EXPECT_NE(chunks.out.find("--virtual-stages: 2 stages a rank over 2 ranks make 4 stages, more than the model's 2 "
                            "layers"),
            std::string::npos)
      << chunks.out;
  const CommandResult alone = run("alone", "--virtual-stages 2");
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.out.find("--virtual-stages: 2 stages a rank need pipeline parallelism (--pp 2 or more)"),
            std::string::npos)
      << alone.out;
  const CommandResult sharded = run("sharded", "--nproc-per-node 4 --pp 2 --shard optimizer");
  EXPECT_NE(sharded.exit_code, 0);
  EXPECT_NE(sharded.out.find("--shard optimizer"), std::string::npos) << sharded.out;
  schedule_ = "--batch 2 --seq 32 --grad-accum 3";
  const CommandResult groups = run("groups", "--nproc-per-node 2 --pp 2", "micro4.json");
  EXPECT_EQ(groups.exit_code, 0) << groups.out;  // 1F1B takes any count
  const CommandResult uneven = run("uneven", "--nproc-per-node 2 --pp 2 --virtual-stages 2", "micro4.json");
  EXPECT_NE(uneven.exit_code, 0);
  EXPECT_NE(uneven.out.find("3 micro-batches a pipeline are not a multiple of 2"), std::string::npos) << uneven.out;
}

// A stage that hangs (SIGSTOP) leaves its neighbour waiting on a hidden
// state or a gradient: the wait ends within --rank-timeout, naming the
// cause, and the run ends with an error.
TEST_F(PipelineParallel, AHungStageEndsTheRunWithinTheTimeout) {
  using namespace std::chrono_literals;
  const std::string log = dir_ / "hung.log";
  const std::vector<std::string> args =
      words_of("train --device cpu --config " + (dir_ / "micro.json") + " --vocab 300 --data " + (dir_ / "corpus.txt") +
               " --separator % --batch 2 --seq 32 --grad-accum 4 --steps 100000 --sample-tokens 0 --quiet "
               "--nproc-per-node 2 --pp 2 --rank-timeout 5 --out " + (dir_ / "hung"));
  const std::optional<HungRun> hung = hang_a_rank_after_a_step(args, dir_ / "hung", log);
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->exit_code, 1) << read_file(log);
  EXPECT_LT(hung->ended_after, 30s);
  EXPECT_NE(read_file(log).find("rank 0: ended with exit code 1; stopping the other ranks"), std::string::npos)
      << read_file(log);
}

}  // namespace
}  // namespace spillway::e2e

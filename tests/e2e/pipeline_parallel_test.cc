// Pipeline-parallel training on the CPU backend, ranks as processes, through
// the command line users get (`--pp S` with `--nproc-per-node`): ranks that
// each hold a stage of the layers train what one rank trains, a tied table
// kept alike on the first and last stage, beside data parallelism and with
// each stage's layers split by tensor parallelism; the
// checkpoint is the whole model, so a run saved in stages resumes on one
// rank and the other way round; a split the model does not allow is one
// clear error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

class PipelineParallel : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef SPILLWAY_HAS_GLOO
    GTEST_SKIP() << "built without Gloo: the CPU backend runs one rank";
#endif
    write_file(dir_ / "corpus.txt", make_corpus(400, 7));
    write_file(dir_ / "micro.json", micro_config_json());
    // Four layers and a separate lm_head, for four stages.
    write_file(dir_ / "micro4.json",
               R"({"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
                   "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false})");
  }
  CommandResult run(const std::string& out, const std::string& more, const std::string& config = "micro.json") {
    return run_spillway("train --device cpu --config " + (dir_ / config) + " --vocab 300 --data " +
                        (dir_ / "corpus.txt") +
                        " --separator % --batch 2 --seq 32 --grad-accum 4 --steps 10 --eval-every 5 "
                        "--checkpoint-every 5 --sample-tokens 0 --lr 1e-2 --warmup 2 --quiet --out " +
                        (dir_ / out) + " " + more);
  }
  void train(const std::string& out, const std::string& more, const std::string& config = "micro.json") {
    const CommandResult r = run(out, more, config);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // The stages compute what one rank computes, each sum in its order but
  // for the tied table's two halves (embedding, lm_head) added apart and the
  // ranks' sums: the losses agree to ~1e-7 and the weights to ~1e-5 after
  // ten steps (measured); a stage fed the wrong state moves them by 1e-2.
  void expect_same_training(const std::string& a, const std::string& b) {
    const std::vector<double> la = step_losses(dir_ / a), lb = step_losses(dir_ / b);
    ASSERT_EQ(la.size(), 10u) << a;
    ASSERT_EQ(lb.size(), 10u) << b;
    for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-6 * la[i]) << a << " step " << i + 1;
    EXPECT_LT(max_weight_difference(dir_ / (a + "/step-0000010"), dir_ / (b + "/step-0000010")), 5e-5f) << a;
  }
  ScratchDir dir_{"pipeline_parallel"};
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
  const CommandResult sharded = run("sharded", "--nproc-per-node 4 --pp 2 --shard optimizer");
  EXPECT_NE(sharded.exit_code, 0);
  EXPECT_NE(sharded.out.find("--shard optimizer"), std::string::npos) << sharded.out;
}

}  // namespace
}  // namespace spillway::e2e

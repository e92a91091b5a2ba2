// Runs of the micro model split over CPU ranks (tensor or pipeline
// parallelism) against one rank: the fixture both suites share.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "e2e/e2e_util.h"

namespace spillway::e2e {

class SplitRuns : public ::testing::Test {
 protected:
  explicit SplitRuns(const std::string& scratch) : dir_(scratch) {}
  void SetUp() override {
#ifndef SPILLWAY_HAS_GLOO
    GTEST_SKIP() << "built without Gloo: the CPU backend runs one rank";
#endif
    write_file(dir_ / "corpus.txt", make_corpus(400, 7));
    write_file(dir_ / "micro.json", micro_config_json());
    // Four layers and a separate lm_head: four stages, or two a rank.
    write_file(dir_ / "micro4.json",
               R"({"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
                   "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false})");
  }
  // Ten steps of `schedule_` (256 tokens a step), checkpoints at 5 and 10.
  CommandResult run(const std::string& out, const std::string& more, const std::string& config = "micro.json") {
    return run_spillway("train --device cpu --config " + (dir_ / config) + " --vocab 300 --data " +
                        (dir_ / "corpus.txt") + " --separator % " + schedule_ +
                        " --steps 10 --eval-every 5 --checkpoint-every 5 --sample-tokens 0 --lr 1e-2 --warmup 2 "
                        "--quiet --out " + (dir_ / out) + " " + more);
  }
  void train(const std::string& out, const std::string& more, const std::string& config = "micro.json") {
    const CommandResult r = run(out, more, config);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // A split run adds some sums in pieces (per rank, then over the ranks),
  // so float rounding differs from one rank's: after ten AdamW steps at lr
  // 1e-2 the losses agree to ~1e-7 and the weights to ~2e-5 (measured); a
  // wrong piece or a missing sum moves the losses by 1e-2.
  void expect_same_training(const std::string& a, const std::string& b) {
    const std::vector<double> la = step_losses(dir_ / a), lb = step_losses(dir_ / b);
    ASSERT_EQ(la.size(), 10u) << a;
    ASSERT_EQ(lb.size(), 10u) << b;
    for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-6 * la[i]) << a << " step " << i + 1;
    EXPECT_LT(max_weight_difference(dir_ / (a + "/step-0000010"), dir_ / (b + "/step-0000010")), 5e-5f) << a;
  }
  ScratchDir dir_;
  std::string schedule_ = "--batch 2 --seq 32 --grad-accum 4";
};

}  // namespace spillway::e2e

// Runs of a small model split over two GPUs through NCCL (ranks as
// processes started by --nproc-per-node) against one GPU: the fixture the
// GPU suites of tensor and context parallelism share.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "device/cuda/cuda_device.h"
#include "e2e/e2e_util.h"

namespace spillway::e2e {

class GpuSplitRuns : public ::testing::Test {
 protected:
  explicit GpuSplitRuns(const std::string& scratch) : dir_(scratch) {}
  void SetUp() override {
    if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
    // The ranks inherit it: NVLink multicast stays off on the lent machines.
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    write_file(dir_ / "corpus.txt", make_corpus(400, 7));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  // A small model whose heads have 64 dimensions, as cuDNN's attention
  // takes them, written as `name` in the scratch folder.
  void write_heads64_config(const std::string& name, int layers, bool tied) {
    write_file(dir_ / name, R"({"vocab_size": 300, "hidden_size": 256, "intermediate_size": 512, )"
                            R"("num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256, )"
                            R"("rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_hidden_layers": )" +
                                std::to_string(layers) + R"(, "tie_word_embeddings": )" + (tied ? "true}" : "false}"));
  }
  // Ten steps of `schedule_`, checkpoints at 5 and 10.
  void train(const std::string& out, const std::string& more, const std::string& config = "micro.json") {
    const CommandResult r = run_spillway(
        "train --device cuda --config " + (dir_ / config) + " --vocab 300 --data " + (dir_ / "corpus.txt") +
        " --separator % " + schedule_ + " --steps 10 --eval-every 5 --checkpoint-every 5 "
        "--sample-tokens 0 --lr 1e-2 --warmup 2 --quiet --out " + (dir_ / out) + " " + more);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // A split step rounds its partial results to bf16 before they are summed
  // over the ranks, where one GPU rounds their sum once: the losses agree
  // to bf16 rounding, ~1e-3 (a wrong piece or a missing sum moves them by
  // far more: the first step's loss is log(300) only when every rank's
  // logits are right).
  void expect_same_training(const std::string& a, const std::string& b) {
    const std::vector<double> la = step_losses(dir_ / a), lb = step_losses(dir_ / b);
    ASSERT_EQ(la.size(), 10u) << a;
    ASSERT_EQ(lb.size(), 10u) << b;
    EXPECT_NEAR(la[0], lb[0], 2e-3 * lb[0]) << a;
    for (size_t i = 1; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-2 * lb[i]) << a << " step " << i + 1;
    EXPECT_LT(la.back(), la.front() - 0.5) << a << " does not train";
  }
  ScratchDir dir_;
  std::string schedule_ = "--batch 2 --seq 32 --grad-accum 4";
};

}  // namespace spillway::e2e

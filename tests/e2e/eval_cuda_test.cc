// `spillway eval` on the GPU: the loss of a trained checkpoint on a text
// equals the CPU's, through the GPU decoder's bf16 kernels.
#include <gtest/gtest.h>

#include "device/cuda/cuda_device.h"
#include "e2e/e2e_util.h"
#include "train/checkpoint.h"

namespace spillway::e2e {
namespace {

double loss_of(const std::string& out) {
  const size_t at = out.find('{');
  EXPECT_NE(at, std::string::npos) << out;
  return nlohmann::json::parse(out.substr(at)).at("loss").get<double>();
}

TEST(EvalOnGpu, GivesTheCpusLoss) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  ScratchDir dir("eval_gpu");
  write_file(dir / "corpus.txt", make_corpus(200, 3));
  write_file(dir / "micro.json", micro_config_json());
  write_file(dir / "held_out.txt", make_corpus(20, 11));
  const CommandResult trained =
      run_spillway("train --device cpu --config " + (dir / "micro.json") + " --vocab 300 --data " +
                   (dir / "corpus.txt") + " --separator % --batch 2 --seq 32 --steps 20 --eval-every 0 "
                   "--sample-tokens 0 --lr 1e-2 --warmup 2 --quiet --out " + (dir / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.out;
  const std::string model = train::resolve_checkpoint(dir / "run");
  const std::string eval = "eval -m " + model + " --data " + (dir / "held_out.txt") + " --json";
  const CommandResult cpu = run_spillway(eval + " --device cpu");
  const CommandResult gpu = run_spillway(eval + " --device cuda");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.out;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.out;
  // bf16 weights and activations on the GPU against fp32 on the CPU.
  EXPECT_NEAR(loss_of(gpu.out), loss_of(cpu.out), 1e-2 * loss_of(cpu.out)) << cpu.out << gpu.out;
}

}  // namespace
}  // namespace spillway::e2e

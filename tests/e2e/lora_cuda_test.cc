// `spillway finetune --lora-rank` on the GPU, end to end: a checkpoint holds
// the files the CPU engine's does (the frozen base as it came, a PEFT
// adapter folder, the adapters' moments), its losses track the CPU run's,
// a resumed LoRA or QLoRA run continues bit for bit, and two data-parallel
// GPUs train what one does with their micro-batches accumulated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "device/cuda/cuda_device.h"
#include "e2e/e2e_util.h"
#include "e2e/micro_base.h"
#include "model/llama_weights_io.h"
#include "model/lora_io.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace spillway::e2e {
namespace {

class LoraGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_device_count() == 0) return;
    dir_ = new ScratchDir("lora_gpu");
    train_micro_base(*dir_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  }

  static train::RunConfig finetune(const std::string& run, int64_t steps, train::DeviceChoice device) {
    return lora_finetune(*dir_, run, steps, device);
  }

  static std::set<std::string> files_of(const std::string& dir) {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
  }

  static ScratchDir* dir_;
};

ScratchDir* LoraGpu::dir_ = nullptr;

TEST_F(LoraGpu, WritesTheCpuEnginesFilesAndTracksItsLosses) {
  const train::TrainResult gpu = train::train_model(finetune("gpu", 6, train::DeviceChoice::cuda));
  const train::TrainResult cpu = train::train_model(finetune("cpu", 6, train::DeviceChoice::cpu));
  EXPECT_EQ(files_of(gpu.checkpoint), files_of(cpu.checkpoint));
  EXPECT_EQ(max_weight_difference(train::resolve_checkpoint(*dir_ / "base"), gpu.checkpoint), 0.0f);
  ASSERT_TRUE(model::holds_peft_adapter(gpu.checkpoint));
  EXPECT_EQ(read_file(gpu.checkpoint + "/adapter_config.json"), read_file(cpu.checkpoint + "/adapter_config.json"));
  const model::LlamaWeights base = model::load_llama(gpu.checkpoint);
  const model::LoraWeights adapters = model::load_peft_adapter(gpu.checkpoint, base.config());
  const auto& b = adapters.at("model.layers.0.self_attn.q_proj.lora_B.weight").data;
  EXPECT_TRUE(std::any_of(b.begin(), b.end(), [](float x) { return x != 0.0f; })) << "B should have trained";
  const std::vector<double> g = step_losses(*dir_ / "gpu"), c = step_losses(*dir_ / "cpu");
  ASSERT_EQ(g.size(), c.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], c[i], 2e-2 * c[i]) << "step " << i + 1;
  EXPECT_LT(g.back(), g.front());
}

TEST_F(LoraGpu, AResumedRunContinuesBitIdentically) {
  for (const char* base : {"weights", "nf4", "nf4-dq"}) {
    SCOPED_TRACE(base);
    const std::string name(base);
    auto with_base = [&](train::RunConfig o) {
      o.lora.base = name == "weights" ? model::LoraBase::weights
                    : name == "nf4"   ? model::LoraBase::nf4
                                      : model::LoraBase::nf4_double;
      return o;
    };
    const train::TrainResult straight =
        train::train_model(with_base(finetune("straight-" + name, 4, train::DeviceChoice::cuda)));
    train::RunConfig first = with_base(finetune("halves-" + name, 4, train::DeviceChoice::cuda));
    first.schedule.stop_after = 2;
    train::train_model(first);
    train::RunConfig rest = with_base(finetune("halves-" + name, 4, train::DeviceChoice::cuda));
    rest.run.resume = true;
    const train::TrainResult resumed = train::train_model(rest);
    EXPECT_EQ(step_losses(*dir_ / ("straight-" + name)), step_losses(*dir_ / ("halves-" + name)));
    for (const char* file : {"/adapter_model.safetensors", "/optimizer.safetensors", "/model.safetensors"}) {
      EXPECT_EQ(read_file(straight.checkpoint + file), read_file(resumed.checkpoint + file)) << file;
    }
  }
}

TEST_F(LoraGpu, TwoDataParallelGpusTrainWhatOneDoes) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off on the lent machines
  const std::string args = "finetune -m " + *dir_ / "base" + " --data " + *dir_ / "corpus.txt" +
                           " --separator % --validation-fraction 0 --device cuda --lora-rank 4 --lora-alpha 8 "
                           "--lora-targets all --batch 2 --seq 32 --grad-accum 2 --steps 4 --lr 2e-2 --min-lr 2e-2 "
                           "--warmup 0 --sample-tokens 0 --quiet --out ";
  const CommandResult one = run_spillway(args + *dir_ / "dp1");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const CommandResult two = run_spillway(args + *dir_ / "dp2" + " --nproc-per-node 2");
  ASSERT_EQ(two.exit_code, 0) << two.out;
  // One GPU adds the second micro-batch's gradient into the first's; two
  // add the ranks' sums: the same terms, rounded in another order.
  const std::vector<double> a = step_losses(*dir_ / "dp1"), b = step_losses(*dir_ / "dp2");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-3 * a[i]) << "step " << i + 1;
}

}  // namespace
}  // namespace spillway::e2e

// The weights a run starts from (train/start_weights.h): with QLoRA the
// base is quantized as it is drawn or read, and a QLoRA step over it is
// the step of the engine that quantized the whole model itself, bit for bit
// (losses, gradient norms, adapters, and the base a checkpoint reads back).
#include "train/start_weights.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "model/gguf_llama.h"
#include "model/llama_weights_io.h"
#include "model/lora_io.h"
#include "model/qlora.h"
#include "testing/files.h"
#include "testing/llama.h"
#include "train/engine.h"
#include "train/lora_state.h"

namespace spillway::train {
namespace {

model::LlamaConfig small() { return testing::llama_config(200, 64, 96, 2, 4, 2); }

RunConfig qlora_run(model::LoraBase base) {
  RunConfig run;
  run.lora.rank = 4;
  run.lora.alpha = 8;
  run.lora.targets = "all";
  run.lora.base = base;
  run.run.device = DeviceChoice::cpu;
  run.schedule.seed = 3;
  return run;
}

struct Steps {
  std::vector<double> losses, norms;
  model::LoraWeights adapters;
  std::vector<std::vector<float>> base;  // what a checkpoint reads of the frozen weights
};

// Three steps of the CPU engine over `weights` (with `quantized`, the base
// made as it came; without, the engine quantizes `weights` itself).
Steps three_steps(model::LlamaWeights weights, model::QuantizedBase* quantized, const RunConfig& run) {
  LoraState state = LoraState::fresh(weights.config(), lora_config(run), 5);
  AdamW optimizer;
  EngineOptions o;
  o.batch = 2;
  o.seq = 16;
  o.device = DeviceChoice::cpu;
  o.lora = &state;
  o.lora_base = run.lora.base;
  o.lora_quantized = quantized;
  auto engine = make_engine(weights, optimizer, o);
  Steps s;
  for (int step = 0; step < 3; ++step) {
    const auto tokens = testing::random_tokens(64, 20 + step, 200);
    const std::vector<int32_t> in(tokens.begin(), tokens.begin() + 32), out(tokens.begin() + 32, tokens.end());
    const StepStats stats = engine->train_step(in, out, 1, 1e-2);
    s.losses.push_back(stats.loss);
    s.norms.push_back(stats.grad_norm);
  }
  engine->sync_to_host();
  s.adapters = state.adapters;
  for (size_t i = 0; i < weights.tensors().size(); ++i) {
    s.base.emplace_back(static_cast<size_t>(weights.tensors()[i].shape.numel()));
    engine->read_state(StatePart::master, i, s.base.back());
  }
  return s;
}

void expect_same_steps(const Steps& a, const Steps& b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.norms, b.norms);
  for (size_t i = 0; i < a.adapters.tensors().size(); ++i) {
    EXPECT_EQ(a.adapters.tensors()[i].data, b.adapters.tensors()[i].data) << a.adapters.tensors()[i].name;
  }
  EXPECT_EQ(a.base, b.base);
}

class StartWeightsTest : public testing::TempDirTest {};

TEST_F(StartWeightsTest, AQloraStepOverABaseQuantizedAsDrawnIsTheWholeModelsStep) {
  for (model::LoraBase base : {model::LoraBase::nf4, model::LoraBase::nf4_double}) {
    SCOPED_TRACE(model::lora_base_name(base));
    const RunConfig run = qlora_run(base);
    StartWeights start = random_start_weights(small(), run, 3, 1);
    ASSERT_TRUE(start.quantized);
    EXPECT_TRUE(start.weights.at("model.layers.0.mlp.down_proj.weight").data.empty());
    const Steps streamed = three_steps(std::move(start.weights), &*start.quantized, run);
    const Steps whole = three_steps(model::LlamaWeights::random(small(), 3), nullptr, run);
    expect_same_steps(streamed, whole);
  }
}

TEST_F(StartWeightsTest, AQloraStepOverABaseQuantizedAsReadIsTheWholeModelsStep) {
  save_llama(file("base"), model::LlamaWeights::random(small(), 4));
  const RunConfig run = qlora_run(model::LoraBase::nf4_double);
  StartWeights start = load_start_weights(file("base"), run, true, 1);
  ASSERT_TRUE(start.quantized);
  EXPECT_EQ(start.quantized->tensors.size(), 14u);
  expect_same_steps(three_steps(std::move(start.weights), &*start.quantized, run),
                    three_steps(model::load_llama(file("base")), nullptr, run));
}

// A GGUF base is read a tensor at a time too; and a GPU run's host memory
// is checked before it is read, its config taken from the file's header
// (that half where spillway has CUDA: a CPU build refuses --device cuda).
TEST_F(StartWeightsTest, AGgufBaseIsReadATensorAtATimeAndCheckedBeforeItIsRead) {
  const model::LlamaWeights whole = model::LlamaWeights::random(small(), 6);
  save_gguf_llama(file("base.gguf"), whole, nullptr, GgmlType::f32, "test");
  RunConfig run = qlora_run(model::LoraBase::nf4);
  StartWeights start = load_start_weights(file("base.gguf"), run, true, 1);
  ASSERT_TRUE(start.quantized);
  EXPECT_TRUE(start.weights.at("model.layers.1.self_attn.q_proj.weight").data.empty());
  expect_same_steps(three_steps(std::move(start.weights), &*start.quantized, run),
                    three_steps(model::load_llama(file("base.gguf")), nullptr, run));
#ifdef SPILLWAY_HAS_CUDA
  run.run.device = DeviceChoice::cuda;
  run.memory.host_mem = 4096;
  try {
    load_start_weights(file("base.gguf"), run, true, 1);
    ADD_FAILURE() << "a 4 KiB host budget was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--host-mem"), std::string::npos) << e.what();
  }
#endif
}

// Without NF4 the run starts from the whole model, as before.
TEST_F(StartWeightsTest, WithoutNf4TheWholeModelIsLoaded) {
  const model::LlamaWeights whole = model::LlamaWeights::random(small(), 4);
  save_llama(file("base"), whole);
  StartWeights start = load_start_weights(file("base"), qlora_run(model::LoraBase::weights), true, 1);
  EXPECT_FALSE(start.quantized);
  for (size_t i = 0; i < whole.tensors().size(); ++i) EXPECT_EQ(start.weights.tensors()[i].data, whole.tensors()[i].data);
  RunConfig full;
  full.run.device = DeviceChoice::cpu;
  EXPECT_FALSE(random_start_weights(small(), full, 4, 1).quantized);
}

}  // namespace
}  // namespace spillway::train

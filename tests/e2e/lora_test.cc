// `spillway finetune --lora-rank` end to end on the CPU: a micro model
// trained here is tuned through LoRA adapters; its checkpoints keep the base
// weights untouched beside a PEFT adapter folder's files, `generate` runs
// the checkpoint as the tuned model (and a base model with --adapter as the
// same), and a resumed LoRA run continues bit for bit. QLoRA
// (--lora-base nf4) trains exactly as LoRA over the NF4-dequantized base.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/status.h"
#include "e2e/e2e_util.h"
#include "e2e/micro_base.h"
#include "model/llama_weights_io.h"
#include "model/lora.h"
#include "model/lora_io.h"
#include "model/qlora.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace spillway::e2e {
namespace {

class LoraE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("lora_e2e");
    train_micro_base(*dir_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static train::RunConfig finetune(const std::string& run, int64_t steps) {
    return lora_finetune(*dir_, run, steps, train::DeviceChoice::cpu);
  }

  // The greedy continuation's token ids that `spillway generate ARGS` prints.
  static std::string greedy_ids(const std::string& args) {
    const CommandResult r = run_spillway("generate " + args + " -p 'The cat' -n 12 --temperature 0 --ids -t 2");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return r.out;
  }

  static ScratchDir* dir_;
};

ScratchDir* LoraE2E::dir_ = nullptr;

TEST_F(LoraE2E, TunesAdaptersAloneAndWritesThemAsPeftDoes) {
  const train::TrainResult r = train::train_model(finetune("tuned", 12));
  const std::vector<double> losses = step_losses(*dir_ / "tuned");
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses.back(), losses.front());
  // The base weights are written as they came: frozen.
  EXPECT_EQ(max_weight_difference(train::resolve_checkpoint(*dir_ / "base"), r.checkpoint), 0.0f);
  ASSERT_TRUE(model::holds_peft_adapter(r.checkpoint));
  const model::LlamaWeights base = model::load_llama(r.checkpoint);
  const model::LoraWeights adapters = model::load_peft_adapter(r.checkpoint, base.config());
  EXPECT_EQ(adapters.lora().rank, 4);
  EXPECT_EQ(adapters.lora().targets, (std::vector<std::string>{"q_proj", "v_proj", "down_proj"}));
  const auto& b = adapters.at("model.layers.0.self_attn.q_proj.lora_B.weight").data;
  EXPECT_TRUE(std::any_of(b.begin(), b.end(), [](float x) { return x != 0.0f; })) << "B should have trained";

  // The checkpoint generates as the merged model, and so does the base with
  // the checkpoint's adapter; the base alone differs.
  const std::string merged = *dir_ / "merged";
  std::filesystem::copy(r.checkpoint, merged);
  std::filesystem::remove(merged + "/adapter_config.json");
  std::filesystem::remove(merged + "/adapter_model.safetensors");
  model::save_llama(merged, model::merge_lora(base, adapters));
  const std::string tuned = greedy_ids("-m " + r.checkpoint);
  EXPECT_EQ(tuned, greedy_ids("-m " + merged));
  EXPECT_EQ(tuned, greedy_ids("-m " + *dir_ / "base" + " --adapter " + r.checkpoint));
  EXPECT_NE(tuned, greedy_ids("-m " + *dir_ / "base"));
  // eval scores the tuned checkpoint as the base with its adapter.
  const std::string data = " --data " + *dir_ / "corpus.txt" + " --seq 32 --json -t 2";
  const CommandResult own = run_spillway("eval -m " + r.checkpoint + data);
  const CommandResult given = run_spillway("eval -m " + *dir_ / "base" + " --adapter " + r.checkpoint + data);
  ASSERT_EQ(own.exit_code, 0) << own.out;
  EXPECT_EQ(own.out, given.out);
  EXPECT_NE(own.out, run_spillway("eval -m " + *dir_ / "base" + data).out);

  // convert writes the tuned model as a plain folder, with no adapter left.
  const CommandResult converted = run_spillway("convert --from " + r.checkpoint + " -o " + *dir_ / "converted");
  ASSERT_EQ(converted.exit_code, 0) << converted.out;
  EXPECT_FALSE(model::holds_peft_adapter(*dir_ / "converted"));
  EXPECT_EQ(tuned, greedy_ids("-m " + *dir_ / "converted"));
}

TEST_F(LoraE2E, AResumedLoraRunContinuesBitIdentically) {
  const train::TrainResult straight = train::train_model(finetune("straight", 4));
  train::RunConfig first = finetune("halves", 4);
  first.schedule.stop_after = 2;
  train::train_model(first);
  train::RunConfig rest = finetune("halves", 4);
  rest.run.resume = true;
  const train::TrainResult resumed = train::train_model(rest);
  EXPECT_EQ(step_losses(*dir_ / "straight"), step_losses(*dir_ / "halves"));
  EXPECT_EQ(read_file(straight.checkpoint + "/adapter_model.safetensors"),
            read_file(resumed.checkpoint + "/adapter_model.safetensors"));
  EXPECT_EQ(read_file(straight.checkpoint + "/optimizer.safetensors"),
            read_file(resumed.checkpoint + "/optimizer.safetensors"));
}

// Dropout on the adapters' input (PEFT's lora_dropout): the run trains
// otherwise than without it, its draws depend only on the run's seed and
// place, so a resumed run continues bit-identically, and the adapter's
// config says what it trained with. Two micro-batches a step: each draws its own.
TEST_F(LoraE2E, ADropoutRunDiffersFromNoneAndResumesBitIdentically) {
  auto with_dropout = [](const std::string& run) {
    train::RunConfig o = finetune(run, 4);
    o.lora.dropout = 0.1;
    o.schedule.grad_accum = 2;
    return o;
  };
  const train::TrainResult straight = train::train_model(with_dropout("drop_straight"));
  train::RunConfig first = with_dropout("drop_halves");
  first.schedule.stop_after = 2;
  train::train_model(first);
  train::RunConfig rest = with_dropout("drop_halves");
  rest.run.resume = true;
  const train::TrainResult resumed = train::train_model(rest);
  const std::vector<double> losses = step_losses(*dir_ / "drop_straight");
  EXPECT_EQ(losses, step_losses(*dir_ / "drop_halves"));
  EXPECT_EQ(read_file(straight.checkpoint + "/adapter_model.safetensors"),
            read_file(resumed.checkpoint + "/adapter_model.safetensors"));
  train::RunConfig none = with_dropout("drop_none");
  none.lora.dropout = 0;
  train::train_model(none);
  const std::vector<double> plain = step_losses(*dir_ / "drop_none");
  ASSERT_EQ(plain.size(), losses.size());
  // The first step's adapters are PEFT's start (B = 0): dropout cannot show yet.
  EXPECT_EQ(plain[0], losses[0]);
  EXPECT_NE(plain.back(), losses.back());
  EXPECT_NE(read_file(straight.checkpoint + "/adapter_config.json").find("\"lora_dropout\": 0.1"), std::string::npos)
      << read_file(straight.checkpoint + "/adapter_config.json");
}

// QLoRA: the targeted projections' weights stored NF4. Its steps are those
// of LoRA over a base whose targeted weights are their NF4 round trip, bit
// for bit, and the run writes that base beside a PEFT adapter.
TEST_F(LoraE2E, QloraIsLoraOverTheDequantizedBase) {
  for (const model::LoraBase storage : {model::LoraBase::nf4, model::LoraBase::nf4_double}) {
    const std::string how(model::lora_base_name(storage));
    SCOPED_TRACE(how);
    train::RunConfig q = finetune("qlora_" + how, 8);
    q.lora.base = storage;
    const train::TrainResult r = train::train_model(q);
    const std::vector<double> losses = step_losses(*dir_ / ("qlora_" + how));
    ASSERT_EQ(losses.size(), 8u);
    EXPECT_LT(losses.back(), losses.front());

    // The base as QLoRA sees it, written as a model folder.
    const std::string base_dir = train::resolve_checkpoint(*dir_ / "base");
    model::LlamaWeights base = model::load_llama(base_dir);
    const model::QuantizedBase quantized =
        model::quantize_lora_base(base, train::lora_config(q), storage);
    ASSERT_EQ(quantized.tensors.size(), 3u * static_cast<size_t>(base.config().num_hidden_layers));
    EXPECT_EQ(quantized.names[0], "model.layers.0.self_attn.q_proj.weight");
    EXPECT_LT(quantized.bytes() * 6, quantized.f32_bytes());  // 4 bits and a scale per 64, or less
    const std::string dequantized = *dir_ / ("dequantized_" + how);
    std::filesystem::copy(base_dir, dequantized);
    model::save_llama(dequantized, base);
    EXPECT_GT(max_weight_difference(base_dir, dequantized), 0.0f);

    train::RunConfig l = finetune("lora_over_" + how, 8);
    l.model.init_from = dequantized;
    const train::TrainResult lr = train::train_model(l);
    EXPECT_EQ(losses, step_losses(*dir_ / ("lora_over_" + how)));
    EXPECT_EQ(read_file(r.checkpoint + "/adapter_model.safetensors"),
              read_file(lr.checkpoint + "/adapter_model.safetensors"));
    // The checkpoint: the dequantized base and a PEFT adapter.
    EXPECT_EQ(max_weight_difference(dequantized, r.checkpoint), 0.0f);
    ASSERT_TRUE(model::holds_peft_adapter(r.checkpoint));
  }
}

// A resumed QLoRA run re-quantizes the base it wrote, which NF4 gives back
// unchanged: it continues bit for bit.
TEST_F(LoraE2E, AResumedQloraRunContinuesBitIdentically) {
  train::RunConfig straight = finetune("q_straight", 4);
  straight.lora.base = model::LoraBase::nf4;
  const train::TrainResult s = train::train_model(straight);
  train::RunConfig first = finetune("q_halves", 4);
  first.lora.base = model::LoraBase::nf4;
  first.schedule.stop_after = 2;
  train::train_model(first);
  train::RunConfig rest = finetune("q_halves", 4);
  rest.lora.base = model::LoraBase::nf4;
  rest.run.resume = true;
  const train::TrainResult resumed = train::train_model(rest);
  EXPECT_EQ(step_losses(*dir_ / "q_straight"), step_losses(*dir_ / "q_halves"));
  EXPECT_EQ(read_file(s.checkpoint + "/adapter_model.safetensors"),
            read_file(resumed.checkpoint + "/adapter_model.safetensors"));
}

TEST_F(LoraE2E, QloraRunsSayWhatTheBaseTakes) {
  const std::string common = "finetune -m " + *dir_ / "base" + " --data " + *dir_ / "corpus.txt" +
                             " --separator % --device cpu --steps 1 --batch 2 --seq 16 --sample-tokens 0" +
                             " --lora-rank 4 --lora-targets q,v,down -o ";
  const CommandResult r = run_spillway(common + *dir_ / "q_cli" + " --lora-base nf4");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("; NF4 base: 6 projections stored in "), std::string::npos) << r.out;
  const CommandResult dq = run_spillway(common + *dir_ / "q_cli_dq" + " --lora-base nf4-dq");
  ASSERT_EQ(dq.exit_code, 0) << dq.out;
  EXPECT_NE(dq.out.find("; NF4 base (double-quantized scales): 6 projections stored in "), std::string::npos)
      << dq.out;
}

TEST_F(LoraE2E, BadLoraSettingsAreOneLine) {
  const std::string common = "finetune -m " + *dir_ / "base" + " --data " + *dir_ / "corpus.txt" +
                             " --separator % --device cpu --steps 1 -o " + *dir_ / "bad" + " --lora-rank 4 ";
  CommandResult r = run_spillway(common + "--lora-dropout 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("spillway: --lora-dropout: 1 must be at least 0 and below 1"), std::string::npos) << r.out;
  r = run_spillway(common + "--lora-targets q,lm_head");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("spillway: --lora-targets: 'lm_head' is not a projection LoRA can adapt"), std::string::npos)
      << r.out;
  for (const std::string shard : {"optimizer", "gradients", "weights"}) {
    r = run_spillway(common + "--shard " + shard);
    EXPECT_EQ(r.exit_code, 1);
    const std::string line = "spillway: --shard " + shard + ": LoRA's state is small; it is not sharded";
    EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(line), r.out.rfind(line)) << r.out;
  }
  r = run_spillway(common + "--lora-base int3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("spillway: --lora-base: unknown value 'int3'; one of weights, nf4, nf4-dq"), std::string::npos)
      << r.out;
  r = run_spillway("finetune -m " + *dir_ / "base" + " --data " + *dir_ / "corpus.txt" +
                   " --device cpu --steps 1 -o " + *dir_ / "bad" + " --lora-base nf4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("spillway: --lora-base: nf4 keeps LoRA's frozen base; it needs --lora-rank"),
            std::string::npos)
      << r.out;
  r = run_spillway("train --lora-rank 4 --steps 1 -o " + *dir_ / "bad_train");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--lora-rank"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace spillway::e2e

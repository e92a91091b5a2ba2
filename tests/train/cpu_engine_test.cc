// The CPU engine's gradient accumulation: the step adds every micro-batch's
// gradients into one buffer and AdamW takes their mean, clipped, through one
// scale, so 2 micro-batches of batch B update the weights as 1 of batch 2B.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "model/lora.h"
#include "train/engine.h"
#include "testing/llama.h"

namespace spillway::train {
namespace {

model::LlamaConfig config(bool tied) {
  return testing::llama_config(64, 32, 48, 2, 4, 2, tied);
}

std::vector<int32_t> tokens(size_t n, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t x = seed;
  for (auto& v : t) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int32_t>((x >> 33) % 64);
  }
  return t;
}

double rel_diff(const model::LlamaWeights& a, const model::LlamaWeights& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    for (size_t j = 0; j < a.tensors()[i].data.size(); ++j) {
      const double d = static_cast<double>(a.tensors()[i].data[j]) - b.tensors()[i].data[j];
      diff += d * d;
      ref += static_cast<double>(a.tensors()[i].data[j]) * a.tensors()[i].data[j];
    }
  }
  return std::sqrt(diff / ref);
}

struct Case {
  bool tied;
  double grad_clip;  // 0: none; 0.05: every step clips
};

TEST(CpuEngine, TwoMicroBatchesUpdateAsOneBatchOfTwiceTheSize) {
  for (const Case c : {Case{false, 0.0}, Case{false, 0.05}, Case{true, 0.05}}) {
    SCOPED_TRACE(std::string(c.tied ? "tied" : "untied") + ", clip " + std::to_string(c.grad_clip));
    EngineOptions whole_opts, half_opts;
    whole_opts.batch = 4;
    half_opts.batch = 2;
    whole_opts.seq = half_opts.seq = 16;
    whole_opts.grad_clip = half_opts.grad_clip = c.grad_clip;
    whole_opts.device = half_opts.device = DeviceChoice::cpu;
    auto w_whole = model::LlamaWeights::random(config(c.tied), 4, 0.1);
    auto w_halves = w_whole;
    const auto w0 = w_whole;
    AdamW o_whole(config(c.tied)), o_halves(config(c.tied));
    auto whole = make_cpu_engine(w_whole, o_whole, whole_opts);
    auto halves = make_cpu_engine(w_halves, o_halves, half_opts);
    for (int step = 0; step < 3; ++step) {
      // Inputs are [micro-batch][batch][seq]: the halves are the whole's rows 0-1 and 2-3.
      auto in = tokens(64, 10 + step), out = tokens(64, 50 + step);
      StepStats a = whole->train_step(in, out, 1, 1e-2);
      StepStats b = halves->train_step(in, out, 2, 1e-2);
      EXPECT_NEAR(a.loss, b.loss, 1e-5 * a.loss) << "step " << step;
      EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * a.grad_norm) << "step " << step;
      if (c.grad_clip > 0) {
        EXPECT_GT(a.grad_norm, c.grad_clip) << "the case must clip";
      }
    }
    EXPECT_GT(rel_diff(w0, w_whole), 1e-3) << "the steps must move the weights";
    EXPECT_LT(rel_diff(w_whole, w_halves), 2e-5);
    EXPECT_LT(rel_diff(o_whole.m, o_halves.m), 2e-5);
    EXPECT_LT(rel_diff(o_whole.v, o_halves.v), 2e-5);
    EXPECT_EQ(o_whole.steps_taken, 3);
    EXPECT_EQ(o_halves.steps_taken, 3);
  }
}

// The gradient buffer is zeroed by each optimizer step, so a step's update
// does not depend on the steps before it: two engines that took different
// first steps take the same second step from the same weights and moments.
TEST(CpuEngine, EachStepStartsANewGradientSum) {
  EngineOptions o;
  o.batch = 2;
  o.seq = 16;
  o.grad_clip = 0;
  o.device = DeviceChoice::cpu;
  auto w_a = model::LlamaWeights::random(config(false), 5, 0.1);
  AdamW opt_a(config(false));
  auto a = make_cpu_engine(w_a, opt_a, o);
  a->train_step(tokens(64, 1), tokens(64, 2), 2, 1e-2);
  // b starts where a is now, with a's moments.
  auto w_b = w_a;
  AdamW opt_b = opt_a;
  auto b = make_cpu_engine(w_b, opt_b, o);
  StepStats sa = a->train_step(tokens(64, 3), tokens(64, 4), 2, 1e-2);
  StepStats sb = b->train_step(tokens(64, 3), tokens(64, 4), 2, 1e-2);
  EXPECT_EQ(sa.loss, sb.loss);
  EXPECT_EQ(sa.grad_norm, sb.grad_norm);
  for (size_t i = 0; i < w_a.tensors().size(); ++i) {
    EXPECT_EQ(w_a.tensors()[i].data, w_b.tensors()[i].data) << w_a.tensors()[i].name;
  }
}

// With the weighted loss (instruction data) micro-batches that count very
// different numbers of targets still update the weights as the one big
// batch does, its loss the mean over all counted targets: the second half
// counts 2 targets to the first's 30. The unweighted mean of the halves'
// means would weigh those 2 targets 15 times as much.
TEST(CpuEngine, WeightedLossOfUnevenMicroBatchesEqualsOneBatch) {
  EngineOptions whole_opts, half_opts;
  whole_opts.batch = 4;
  half_opts.batch = 2;
  whole_opts.seq = half_opts.seq = 16;
  whole_opts.grad_clip = half_opts.grad_clip = 0;
  whole_opts.device = half_opts.device = DeviceChoice::cpu;
  whole_opts.weighted_loss = half_opts.weighted_loss = true;
  auto w_whole = model::LlamaWeights::random(config(false), 6, 0.1);
  auto w_halves = w_whole;
  AdamW o_whole(config(false)), o_halves(config(false));
  auto whole = make_cpu_engine(w_whole, o_whole, whole_opts);
  auto halves = make_cpu_engine(w_halves, o_halves, half_opts);
  EngineOptions plain_opts = whole_opts;
  plain_opts.weighted_loss = false;
  auto w_plain = w_whole;
  AdamW o_plain(config(false));
  auto plain = make_cpu_engine(w_plain, o_plain, plain_opts);
  for (int step = 0; step < 2; ++step) {
    auto in = tokens(64, 20 + step), out = tokens(64, 60 + step);
    for (size_t i = 32; i < 64; ++i) {
      if (i != 40 && i != 63) out[i] = -100;  // the second micro-batch counts two targets
    }
    const StepStats a = whole->train_step(in, out, 1, 1e-2);
    const StepStats b = halves->train_step(in, out, 2, 1e-2);
    const StepStats c = plain->train_step(in, out, 1, 1e-2);  // the plain mean over the one batch
    EXPECT_NEAR(a.loss, c.loss, 1e-5 * c.loss) << "step " << step;
    EXPECT_NEAR(b.loss, c.loss, 1e-5 * c.loss) << "step " << step;
    EXPECT_NEAR(b.grad_norm, c.grad_norm, 1e-4 * c.grad_norm) << "step " << step;
  }
  EXPECT_LT(rel_diff(w_plain, w_whole), 2e-5);
  EXPECT_LT(rel_diff(w_plain, w_halves), 2e-5);
}

// LoRA on the CPU engine: the weights stay bit for bit as they were, the
// adapters and their moments move, the loss falls, and the engine's
// evaluation of the adapted model is the plain model's over the merged
// weights.
TEST(CpuEngine, LoraTrainsTheAdaptersAloneOverFrozenWeights) {
  const auto c = config(true);
  const model::LoraConfig lora = {.rank = 4, .alpha = 8, .targets = model::parse_lora_targets("all", "test")};
  auto weights = model::LlamaWeights::random(c, 9, 0.1);
  const auto frozen = weights;
  LoraState state = LoraState::fresh(c, lora, 5);
  const auto initial = state.adapters;
  AdamW optimizer;  // no moments of the weights: LoRA keeps its own
  EngineOptions o;
  o.batch = 2;
  o.seq = 16;
  o.device = DeviceChoice::cpu;
  o.lora = &state;
  auto engine = make_cpu_engine(weights, optimizer, o);
  EXPECT_NE(engine->description().find("LoRA rank 4 on 14 projections"), std::string::npos) << engine->description();
  const auto in = tokens(64, 1), out = tokens(64, 2);
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) losses.push_back(engine->train_step(in, out, 2, 1e-2).loss);
  EXPECT_LT(losses.back(), losses.front() - 0.5) << losses.front();
  EXPECT_EQ(optimizer.steps_taken, 20);
  for (size_t i = 0; i < weights.tensors().size(); ++i) {
    EXPECT_EQ(weights.tensors()[i].data, frozen.tensors()[i].data) << weights.tensors()[i].name;
  }
  for (size_t i = 0; i < state.adapters.tensors().size(); ++i) {
    EXPECT_NE(state.adapters.tensors()[i].data, initial.tensors()[i].data) << state.adapters.tensors()[i].name;
    EXPECT_NE(state.v.tensors()[i].data, model::LoraWeights::zeros(c, lora).tensors()[i].data);
  }

  auto merged = model::merge_lora(weights, state.adapters);
  AdamW unused(c);
  EngineOptions plain = o;
  plain.lora = nullptr;
  auto merged_engine = make_cpu_engine(merged, unused, plain);
  const std::span<const int32_t> x = std::span(in).first(32), y = std::span(out).first(32);
  EXPECT_NEAR(engine->eval_loss(x, y), merged_engine->eval_loss(x, y), 1e-5);
}

}  // namespace
}  // namespace spillway::train

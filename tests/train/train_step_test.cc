#include "train/train_step.h"

#include <gtest/gtest.h>

#include <cmath>

#include "device/cpu/cpu_device.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "testing/llama.h"

namespace spillway::train {
namespace {

model::LlamaConfig small() {
  return testing::llama_config(32, 32, 64, 2, 4, 2);
}

TEST(TrainStep, AdamWStepsDriveTheLossDownOnARepeatingSequence) {
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  const int64_t batch = 2, seq = 16;
  TrainStep step(small(), batch, seq, *space);
  auto weights = model::LlamaWeights::random(small(), 1);
  auto grads = model::LlamaWeights::zeros(small());
  AdamW opt(small());
  std::vector<int32_t> tokens, targets;
  for (int64_t i = 0; i < batch * seq; ++i) {
    tokens.push_back(static_cast<int32_t>((i * 7) % 13));
    targets.push_back(static_cast<int32_t>(((i + 1) * 7) % 13));
  }
  double first = step.run(weights, tokens, targets);
  EXPECT_NEAR(first, std::log(32.0), 0.3);  // a fresh model guesses uniformly
  double loss = first;
  for (int i = 0; i < 40; ++i) {
    loss = step.run(weights, tokens, targets);
    step.write_gradients(grads, 1.0f, false);
    clip_grad_norm(grads, 1.0);
    opt.step(weights, grads, 3e-3);
  }
  EXPECT_LT(loss, 0.2 * first);
}

// The step adds its gradients into the caller's buffer: two halves run into
// one buffer hold twice the gradient of the whole batch (whose loss is their
// mean), and the buffer is all the gradient memory there is.
TEST(TrainStep, AccumulatedGradientsOfTwoHalvesEqualTheWholeBatch) {
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  const int64_t seq = 8;
  TrainStep whole(small(), 2, seq, *space);
  TrainStep half(small(), 1, seq, *space);
  auto weights = model::LlamaWeights::random(small(), 2);
  std::vector<int32_t> tokens, targets;
  for (int64_t i = 0; i < 2 * seq; ++i) {
    tokens.push_back(static_cast<int32_t>((i * 5 + 3) % 32));
    targets.push_back(static_cast<int32_t>((i * 11 + 1) % 32));
  }
  auto g_whole = model::LlamaWeights::zeros(small());
  auto g_sum = model::LlamaWeights::zeros(small());
  double l_whole = whole.run(weights, tokens, targets, g_whole);
  std::span<const int32_t> t(tokens), y(targets);
  double l0 = half.run(weights, t.subspan(0, seq), y.subspan(0, seq), g_sum);
  const uint64_t in_use = space->in_use();
  double l1 = half.run(weights, t.subspan(seq, seq), y.subspan(seq, seq), g_sum);
  EXPECT_EQ(space->in_use(), in_use);  // the loss of the last run, nothing for gradients
  EXPECT_NEAR(l_whole, 0.5 * (l0 + l1), 1e-5);
  for (size_t i = 0; i < g_whole.tensors().size(); ++i) {
    const auto& a = g_whole.tensors()[i].data;
    const auto& b = g_sum.tensors()[i].data;
    double diff = 0, ref = 0;
    for (size_t j = 0; j < a.size(); ++j) {
      diff += (a[j] - 0.5 * b[j]) * (a[j] - 0.5 * b[j]);
      ref += a[j] * a[j];
    }
    EXPECT_GT(ref, 0) << g_whole.tensors()[i].name;
    EXPECT_LT(std::sqrt(diff / ref), 1e-5) << g_whole.tensors()[i].name;
  }
  // Without a buffer the step keeps its own, zeroed each run: the same
  // gradient as the first half alone, whatever ran before.
  auto g_first = model::LlamaWeights::zeros(small()), g_kept = model::LlamaWeights::zeros(small());
  half.run(weights, t.subspan(0, seq), y.subspan(0, seq), g_first);
  half.run(weights, t.subspan(seq, seq), y.subspan(seq, seq));
  half.run(weights, t.subspan(0, seq), y.subspan(0, seq));
  half.write_gradients(g_kept, 1.0f, false);
  for (size_t i = 0; i < g_first.tensors().size(); ++i) {
    EXPECT_EQ(g_first.tensors()[i].data, g_kept.tensors()[i].data) << g_first.tensors()[i].name;
  }
}

TEST(LrSchedule, WarmsUpThenFollowsTheCosine) {
  LrSchedule s{1e-3, 1e-4, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(60), 0.5 * (1e-3 + 1e-4), 1e-12);
  EXPECT_NEAR(s.at(110), 1e-4, 1e-12);
  EXPECT_NEAR(s.at(500), 1e-4, 1e-12);
}

}  // namespace
}  // namespace spillway::train

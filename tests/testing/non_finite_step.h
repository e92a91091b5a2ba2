// One check for every engine: a batch whose logits turn NaN skips its
// update. The NaN comes in the way real ones do, through the data: one
// embedding row is NaN, so a batch holding that token has NaN activations,
// logits and loss, and a batch without it trains normally (the row's
// gradient is zero; AdamW leaves it NaN, nowhere else).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "testing/llama.h"
#include "train/engine.h"

namespace spillway::testing {

using MakeEngine = std::function<std::unique_ptr<train::Engine>(model::LlamaWeights&, train::AdamW&)>;

inline bool same_bits(const model::LlamaWeights& a, const model::LlamaWeights& b) {
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const auto &x = a.tensors()[i].data, &y = b.tensors()[i].data;
    if (x.size() != y.size() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

// `config` must have untied embeddings (a NaN row of a tied lm_head would
// spoil every batch's logits) and a vocabulary above 8.
inline void expect_non_finite_step_skipped(const model::LlamaConfig& config, int64_t batch, int64_t seq,
                                           const MakeEngine& make) {
  constexpr int32_t kPoisoned = 7;
  auto weights = model::LlamaWeights::random(config, 5, 0.05);
  for (auto& t : weights.tensors()) {
    if (t.name != "model.embed_tokens.weight") continue;
    const auto h = static_cast<size_t>(config.hidden_size);
    std::fill_n(t.data.begin() + kPoisoned * h, h, NAN);
  }
  train::AdamW optimizer(config);
  auto engine = make(weights, optimizer);
  const auto n = static_cast<size_t>(batch * seq);
  auto clean_batch = [&](uint64_t seed) {
    auto ids = random_tokens(2 * n, seed, static_cast<int32_t>(config.vocab_size));
    for (auto& id : ids) id = id == kPoisoned ? kPoisoned + 1 : id;
    return ids;
  };
  auto step = [&](const std::vector<int32_t>& ids) {
    return engine->train_step(std::span<const int32_t>(ids).first(n), std::span<const int32_t>(ids).last(n), 1,
                              1e-3);
  };

  const train::StepStats first = step(clean_batch(1));
  EXPECT_TRUE(first.updated);
  EXPECT_TRUE(std::isfinite(first.loss) && std::isfinite(first.grad_norm));
  engine->sync_to_host();
  const model::LlamaWeights after_first = weights;
  const train::AdamW moments_after_first = optimizer;
  ASSERT_EQ(optimizer.steps_taken, 1);

  auto poisoned = clean_batch(2);
  poisoned[n / 2] = kPoisoned;
  const train::StepStats bad = step(poisoned);
  EXPECT_FALSE(bad.updated);
  EXPECT_FALSE(std::isfinite(bad.loss));
  engine->sync_to_host();
  EXPECT_TRUE(same_bits(weights, after_first)) << "a skipped step changed the weights";
  EXPECT_TRUE(same_bits(optimizer.m, moments_after_first.m)) << "a skipped step changed AdamW's first moment";
  EXPECT_TRUE(same_bits(optimizer.v, moments_after_first.v)) << "a skipped step changed AdamW's second moment";
  EXPECT_EQ(optimizer.steps_taken, 1);

  const train::StepStats next = step(clean_batch(3));
  EXPECT_TRUE(next.updated);
  EXPECT_TRUE(std::isfinite(next.loss));
  engine->sync_to_host();
  EXPECT_EQ(optimizer.steps_taken, 2);
  EXPECT_FALSE(same_bits(weights, after_first));
}

}  // namespace spillway::testing

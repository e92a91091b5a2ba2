#include "infer/evaluate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/status.h"
#include "infer/llama_decoder.h"
#include "testing/llama.h"

namespace spillway::infer {
namespace {

// The loss by hand: every target's log-softmax from one forward pass over
// all the ids.
double direct_loss(const model::LlamaWeights& w, const std::vector<int32_t>& ids) {
  LlamaDecoder decoder(w, static_cast<int64_t>(ids.size()));
  const std::vector<float> logits = decoder.forward(ids);
  const auto vocab = static_cast<size_t>(w.config().vocab_size);
  double sum = 0;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    double total = 0;
    for (size_t v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(logits[i * vocab + v]));
    sum += std::log(total) - logits[i * vocab + static_cast<size_t>(ids[i + 1])];
  }
  return sum / static_cast<double>(ids.size() - 1);
}

TEST(Evaluate, OneWindowIsTheWholeSequencesMeanLoss) {
  const model::LlamaWeights w = model::LlamaWeights::random(testing::llama_config(40, 16, 32, 2, 4, 2), 3, 0.2);
  const std::vector<int32_t> ids = testing::random_tokens(20, 1, 40);
  LlamaDecoder decoder(w, 32);
  LossSum sum;
  add_loss(decoder, ids, 31, sum);
  EXPECT_EQ(sum.tokens, 19);
  EXPECT_NEAR(sum.mean(), direct_loss(w, ids), 1e-5);
  EXPECT_NEAR(sum.perplexity(), std::exp(sum.mean()), 1e-9);
}

TEST(Evaluate, WindowsPredictEveryTokenOnceFromItsWindow) {
  const model::LlamaWeights w = model::LlamaWeights::random(testing::llama_config(40, 16, 32, 2, 4, 2), 4, 0.2);
  const std::vector<int32_t> ids = testing::random_tokens(11, 2, 40);
  LlamaDecoder decoder(w, 5);
  LossSum sum;
  add_loss(decoder, ids, 4, sum);  // windows [0, 5), [4, 9), [8, 11)
  EXPECT_EQ(sum.tokens, 10);
  const double want = (direct_loss(w, {ids.begin(), ids.begin() + 5}) * 4 +
                       direct_loss(w, {ids.begin() + 4, ids.begin() + 9}) * 4 +
                       direct_loss(w, {ids.begin() + 8, ids.end()}) * 2) / 10;
  EXPECT_NEAR(sum.mean(), want, 1e-5);
  LlamaDecoder small(w, 4);
  EXPECT_THROW(add_loss(small, ids, 4, sum), Error);  // a window needs 5 tokens of room
}

}  // namespace
}  // namespace spillway::infer

// A stage's share of the weights (LlamaWeights::only): the kept tensors
// whole and equal, the rest empty, indexed as the whole model is.
#include "model/llama_weights.h"

#include <gtest/gtest.h>

#include "base/status.h"
#include "model/llama_config_json.h"

namespace spillway::model {
namespace {

TEST(LlamaWeights, OnlyKeepsTheChosenTensorsWhereTheWholeHasThem) {
  LlamaConfig c = resolve_config("tiny");
  const LlamaWeights whole = LlamaWeights::random(c, 3);
  std::vector<bool> keep(whole.tensors().size(), false);
  for (size_t i = 0; i < keep.size(); i += 2) keep[i] = true;
  const LlamaWeights part = whole.only(keep);
  ASSERT_EQ(part.tensors().size(), whole.tensors().size());
  EXPECT_EQ(part.config().num_hidden_layers, c.num_hidden_layers);
  for (size_t i = 0; i < keep.size(); ++i) {
    EXPECT_EQ(part.tensors()[i].name, whole.tensors()[i].name);
    if (keep[i]) {
      EXPECT_EQ(part.tensors()[i].shape, whole.tensors()[i].shape);
      EXPECT_EQ(part.tensors()[i].data, whole.tensors()[i].data);
    } else {
      EXPECT_EQ(part.tensors()[i].shape.numel(), 0);
      EXPECT_TRUE(part.tensors()[i].data.empty());
    }
  }
  EXPECT_THROW(whole.only({true}), Error);
}

}  // namespace
}  // namespace spillway::model

// A stage's share of the weights (LlamaWeights::only): the kept tensors
// whole and equal, the rest empty, indexed as the whole model is; taken
// (take_only), the same share, the holder left with names and shapes alone;
// a rank's tensor-parallel pieces taken the same way (take_llama_pieces).
#include "model/llama_weights.h"

#include <gtest/gtest.h>

#include "base/status.h"
#include "model/llama_config_json.h"
#include "model/llama_sharding.h"

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

// Names and shapes of the whole model, and no values anywhere.
void expect_without_values(const LlamaWeights& w, const LlamaWeights& like) {
  ASSERT_EQ(w.tensors().size(), like.tensors().size());
  for (size_t i = 0; i < w.tensors().size(); ++i) {
    EXPECT_EQ(w.tensors()[i].name, like.tensors()[i].name);
    EXPECT_EQ(w.tensors()[i].shape, like.tensors()[i].shape);
    EXPECT_TRUE(w.tensors()[i].data.empty());
    EXPECT_EQ(w.tensors()[i].data.capacity(), 0u);  // given back, not just cleared
  }
}

TEST(LlamaWeights, TakenSharesEqualCopiedOnesAndLeaveNoValuesBehind) {
  const LlamaConfig c = resolve_config("tiny");
  const LlamaWeights whole = LlamaWeights::random(c, 3);
  expect_without_values(LlamaWeights::without_values(c), whole);
  std::vector<bool> keep(whole.tensors().size(), false);
  for (size_t i = 1; i < keep.size(); i += 3) keep[i] = true;
  LlamaWeights holder = whole;
  const LlamaWeights taken = holder.take_only(keep), copied = whole.only(keep);
  for (size_t i = 0; i < keep.size(); ++i) {
    EXPECT_EQ(taken.tensors()[i].shape, copied.tensors()[i].shape);
    EXPECT_EQ(taken.tensors()[i].data, copied.tensors()[i].data);
  }
  expect_without_values(holder, whole);
  for (int rank = 0; rank < 2; ++rank) {
    LlamaWeights cut = whole;
    const LlamaWeights pieces = take_llama_pieces(cut, c, rank, 2), want = llama_pieces(whole, c, rank, 2);
    for (size_t i = 0; i < want.tensors().size(); ++i) {
      EXPECT_EQ(pieces.tensors()[i].shape, want.tensors()[i].shape);
      EXPECT_EQ(pieces.tensors()[i].data, want.tensors()[i].data);
    }
    expect_without_values(cut, whole);
  }
}

}  // namespace
}  // namespace spillway::model
